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

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/testserver"
	"github.com/jackc/pgx/v5"
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
	l, err := b.Acquire(context.Background(), key, driver.AcquireOptions{TTL: time.Minute, Owner: owner})
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

// status on PostgreSQL installs nothing: a role that may only read lists
// no lock where the package's tables do not exist, and lists the holders
// once it may read them, in both modes.
func TestPostgresStatusCreatesNothing(t *testing.T) {
	e := newEnv(t)
	pg := testserver.StartPostgres(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE ROLE reader LOGIN"); err != nil {
		t.Fatal(err)
	}
	reader := strings.Replace(pg.DSN, "://postgres@", "://reader@", 1)
	for _, mode := range []string{"", "&mode=lease"} {
		r := e.run("--backend", reader+mode, "status")
		if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no lock held") {
			t.Fatalf("status%s as a reader without the tables: exit %d, stdout %q, stderr %q; want 0 and no lock held", mode, r.code, r.stdout, r.stderr)
		}
	}
	var objects int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'distlock%'`).Scan(&objects); err != nil || objects != 0 {
		t.Fatalf("status created %d tables (%v)", objects, err)
	}

	for _, mode := range []string{"", "&mode=lease"} {
		pidFile := e.path("holder" + mode + ".pid")
		holder := e.start(e.command("--backend", pg.DSN+mode, "run", "jobs/held", "--", "sh", "-c",
			fmt.Sprintf(`echo $$ > %s; exec sleep 600`, sh(pidFile))))
		readInt(t, pidFile)
		if _, err := admin.Exec(ctx, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader"); err != nil {
			t.Fatal(err)
		}
		r := e.run("--backend", reader+mode, "status")
		if r.code != 0 || !strings.Contains(r.stdout, "jobs/held") {
			t.Errorf("status%s as a reader: exit %d, stdout %q, stderr %q; want jobs/held listed", mode, r.code, r.stdout, r.stderr)
		}
		holder.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(holder)
	}
}

// status --json writes the token as a string of decimal digits, as the
// gateway does, with --watch too: a token above 2^53 written as a JSON
// number would lose digits in JavaScript (and in jq before 1.7). The
// largest token there is, forged into a real Redis, comes out whole.
func TestStatusJSONTokensAreDecimalStrings(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	const token = "18446744073709551615" // 2^64-1
	value := fmt.Sprintf("secret|%s|%d|0|big", token, time.Now().UnixMilli())
	if _, err := r.Do("SET", "distlock:{jobs/big}:lock", value, "PX", "600000"); err != nil {
		t.Fatal(err)
	}
	backend := "redis://" + r.Addr
	for _, args := range [][]string{{"--backend", backend, "status", "--json"}, {"--backend", backend, "status", "--json", "--watch"}} {
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
		var doc []map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc) != 1 {
			t.Fatalf("%v: %q (%v); want one holder", args, out, err)
		}
		if got, ok := doc[0]["token"].(string); !ok || got != token {
			t.Errorf("%v: token %#v; want the string %q", args, doc[0]["token"], token)
		}
	}
}
