//go:build linux

package cli_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

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
