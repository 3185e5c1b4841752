//go:build linux

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/internal/cli"
	"github.com/distlock/distlock/internal/testserver"
)

// status shows what anyone with access to the lock service wrote there
// with its control characters escaped: no terminal sequences, no forged
// rows. Both durations have one form.
func TestStatusEscapesServerData(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	backend := "redis://" + r.Addr
	key := "jobs/\x1b[2J\x1b]0;pwned\x07"
	owner := "evil\nforged/key  99  x  1.0s  1.0s"
	value := fmt.Sprintf("secret|7|%d|0|%s", time.Now().UnixMilli(), owner)
	if _, err := r.Do("SET", "distlock:{"+key+"}:lock", value, "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	res := e.run("--backend", backend, "status")
	if res.code != 0 {
		t.Fatalf("status: exit %d, stderr %q", res.code, res.stderr)
	}
	if strings.ContainsAny(res.stdout, "\x1b\x07\r") {
		t.Errorf("status printed control characters: %q", res.stdout)
	}
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("status printed %d lines, want a header and one row: %q", len(lines), res.stdout)
	}
	f := strings.Fields(lines[1])
	if f[0] != `"jobs/\x1b[2J\x1b]0;pwned\a"` || f[1] != "7" || f[2] != `"evil\nforged/key` {
		t.Errorf("row %q; want the key and owner quoted with escapes", lines[1])
	}
	// The owner named by run when the lock is held is escaped too.
	if _, err := r.Do("SET", "distlock:{jobs/x}:lock", value, "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	if res := e.run("--backend", backend, "run", "--no-wait", "jobs/x", "--", "true"); res.code != cli.ExitNotAcquired ||
		strings.Count(res.stderr, "\n") != 1 || !strings.Contains(res.stderr, `"evil\nforged/key`) {
		t.Errorf("run on a key held by a forged owner: exit %d, stderr %q; want %d, one line, the owner escaped", res.code, res.stderr, cli.ExitNotAcquired)
	}
	span := regexp.MustCompile(`^[0-9]+\.[0-9]s$`)
	if held, left := f[len(f)-2], f[len(f)-1]; !span.MatchString(held) || !span.MatchString(left) {
		t.Errorf("held for %q, time left %q; want both in tenths of a second", held, left)
	}
}

// The characters that do not print but are not controls either, such as
// the bidirectional controls (U+202E shows the rest of a name backwards:
// "jobs/\u202egnp.exe" reads "jobs/exe.png") and the zero-width ones,
// are escaped in the table and in --json (where the escape decodes to
// the same string), with --watch too.
func TestStatusEscapesInvisibleCharacters(t *testing.T) {
	e := newEnv(t)
	b, err := filelock.New(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	const key, owner = "jobs/\u202egnp.exe\u2066\u200d", "eve\u2067\u200b"
	l, err := b.Acquire(context.Background(), key, distlock.AcquireOptions{TTL: time.Minute, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	hidden := func(s string) bool {
		return strings.ContainsFunc(s, func(r rune) bool { return r >= 0x80 && !unicode.IsPrint(r) })
	}
	res := e.run("status")
	if res.code != 0 || hidden(res.stdout) {
		t.Fatalf("status: exit %d, stdout %+q; want 0 and no invisible character", res.code, res.stdout)
	}
	if !strings.Contains(res.stdout, `"jobs/\u202egnp.exe\u2066\u200d"`) || !strings.Contains(res.stdout, `"eve\u2067\u200b"`) {
		t.Errorf("status: %q; want the key and the owner quoted with escapes", res.stdout)
	}
	for _, args := range [][]string{{"status", "--json"}, {"status", "--json", "--watch"}} {
		var out string
		if args[len(args)-1] == "--watch" {
			s := e.start(e.command(args...))
			waitFor(t, "status --watch --json printed nothing", func() bool { return strings.Contains(s.stdout.String(), "\n") })
			s.cmd.Process.Signal(syscall.SIGTERM)
			e.wait(s)
			out, _, _ = strings.Cut(s.stdout.String(), "\n")
		} else {
			res := e.run(args...)
			if res.code != 0 {
				t.Fatalf("%v: exit %d, stderr %q", args, res.code, res.stderr)
			}
			out = res.stdout
		}
		var doc []struct{ Key, Owner string }
		if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc) != 1 || doc[0].Key != key || doc[0].Owner != owner {
			t.Errorf("%v: %q (%v); want the key and the owner", args, out, err)
		}
		if hidden(out) || !strings.Contains(out, `\u202e`) {
			t.Errorf("%v: %+q; want the invisible characters escaped", args, out)
		}
	}
}
