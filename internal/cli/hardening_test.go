//go:build linux

package cli_test

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/cli"
	"github.com/distlock/distlock/internal/testserver"
)

// A timeout bounds the wait for a held lock: one try is always made, even
// with a timeout shorter than the try takes.
func TestTimeoutMakesOneTry(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "--timeout", "1ns", "k", "--", "true"); r.code != 0 {
		t.Errorf("--timeout 1ns on a free key: exit %d, stderr %q; want 0", r.code, r.stderr)
	}
}

// For cron: --held-exit chooses the status of "not acquired" and --quiet
// silences it, while a failing service is still reported.
func TestHeldExitAndQuiet(t *testing.T) {
	e := newEnv(t)
	holder, _, _ := e.holdKey("k", "holder")
	for _, tc := range []struct {
		args   []string
		code   int
		silent bool
	}{
		{[]string{"--no-wait", "--held-exit", "0", "--quiet"}, 0, true},
		{[]string{"--no-wait", "--held-exit", "3", "-q"}, 3, true},
		{[]string{"--timeout", "100ms", "--held-exit", "4", "--quiet"}, 4, true},
		{[]string{"--no-wait", "--held-exit", "5"}, 5, false},
		{[]string{"--no-wait"}, cli.ExitNotAcquired, false},
	} {
		r := e.run(append(append([]string{"run"}, tc.args...), "k", "--", "true")...)
		if r.code != tc.code || (r.stderr == "") != tc.silent {
			t.Errorf("%q on a held key: exit %d, stderr %q; want %d, silent %v", tc.args, r.code, r.stderr, tc.code, tc.silent)
		}
	}
	if r := e.run("run", "--no-wait", "--held-exit", "256", "k", "--", "true"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--held-exit") {
		t.Errorf("--held-exit 256: exit %d, stderr %q; want %d", r.code, r.stderr, cli.ExitUsage)
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)

	// An unreachable service is not "held": 69, said even with --quiet.
	r := e.run("--backend", "redis://127.0.0.1:1", "run", "--timeout", "1s", "--quiet", "--held-exit", "0", "k", "--", "true")
	if r.code != cli.ExitUnavailable || r.stderr == "" {
		t.Errorf("unreachable service with --quiet --held-exit 0: exit %d, stderr %q; want %d and a message", r.code, r.stderr, cli.ExitUnavailable)
	}
}

// A Redis that may evict keys is a setting of the server, not a usage
// error: exit 69, naming the URL option that accepts the risk.
func TestRedisEvictionPolicyRefused(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t, testserver.WithRedisConfig("maxmemory-policy allkeys-lru"))
	res := e.run("--backend", "redis://"+r.Addr, "run", "k", "--", "true")
	if res.code != cli.ExitUnavailable || !strings.Contains(res.stderr, "?eviction_allowed=true") ||
		strings.Contains(res.stderr, "WithEvictionAllowed") || strings.Contains(res.stderr, "--help") {
		t.Errorf("evicting Redis: exit %d, stderr %q; want %d naming ?eviction_allowed=true, not the Go option or the usage", res.code, res.stderr, cli.ExitUnavailable)
	}
	if res := e.run("--backend", "redis://"+r.Addr+"?eviction_allowed=true", "run", "k", "--", "true"); res.code != 0 {
		t.Errorf("with ?eviction_allowed=true: exit %d, stderr %q", res.code, res.stderr)
	}
}

// The command gets DISTLOCK_BACKEND without the password (nor password
// query parameters): it reaches the same service but cannot reuse
// distlock's credentials, nor print them.
func TestCommandEnvironmentHasNoPassword(t *testing.T) {
	e := newEnv(t)
	const secret = "s3cretpw"
	r := testserver.StartRedis(t, testserver.WithRedisConfig("user alice on >"+secret+" ~* &* +@all"))
	cmd := e.command("run", "k", "--", "sh", "-c", `echo "$DISTLOCK_BACKEND"; cat /proc/$PPID/environ | tr '\0' '\n' | grep DISTLOCK_BACKEND`)
	cmd.Env = append(cmd.Env, "DISTLOCK_BACKEND=redis://alice:"+secret+"@"+r.Addr+"/0")
	res := e.wait(e.start(cmd))
	if res.code != 0 {
		t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
	}
	want := "redis://alice@" + r.Addr + "/0"
	if lines := strings.Split(strings.TrimSpace(res.stdout), "\n"); len(lines) != 2 || lines[0] != want || lines[1] != "DISTLOCK_BACKEND="+want {
		t.Errorf("the command and its supervisor see %q; want %q twice", res.stdout, want)
	}
	if strings.Contains(res.stdout+res.stderr, secret) {
		t.Errorf("the password reached the command: %q", res.stdout)
	}
}

// status shows what anyone with access to the lock service wrote there
// with its control characters escaped: no terminal sequences, no forged
// rows. Both durations have one form.
func TestStatusEscapesServerData(t *testing.T) {
	e := newEnv(t)
	r := testserver.StartRedis(t)
	backend := "redis://" + r.Addr
	key := "jobs/\x1b[2J\x1b]0;pwned\x07"
	owner := "evil\nforged/key  99  x  1.0s  1.0s"
	value := fmt.Sprintf("secret|7|%d|%s", time.Now().UnixMilli(), owner)
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
