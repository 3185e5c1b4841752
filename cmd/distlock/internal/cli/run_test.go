//go:build linux

package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

// The command gets the key and a token; the next run gets a larger token.
func TestRunExportsIncreasingTokens(t *testing.T) {
	e := newEnv(t)
	var last uint64
	for i := range 3 {
		r := e.run("run", "jobs/nightly", "--", "sh", "-c", `echo "$DISTLOCK_KEY $DISTLOCK_TOKEN"`)
		if r.code != 0 {
			t.Fatalf("run %d: exit %d, stderr %q", i, r.code, r.stderr)
		}
		key, tok, _ := strings.Cut(strings.TrimSpace(r.stdout), " ")
		n, err := strconv.ParseUint(tok, 10, 64)
		if key != "jobs/nightly" || err != nil || n <= last {
			t.Fatalf("run %d printed %q; want the key and a token above %d", i, r.stdout, last)
		}
		last = n
	}
}

// Concurrent runs on one key never overlap: each command takes an O_EXCL
// marker for the time it runs and logs its start and end; the log must
// alternate start/end with increasing tokens.
func TestRunsNeverOverlap(t *testing.T) {
	e := newEnv(t)
	marker, log := e.path("inside"), e.path("log")
	script := fmt.Sprintf(`set -C
: > %[1]s || { echo "overlap at token $DISTLOCK_TOKEN" >&2; exit 99; }
echo "start $DISTLOCK_TOKEN" >> %[2]s
sleep 0.01
echo "end $DISTLOCK_TOKEN" >> %[2]s
rm %[1]s`, sh(marker), sh(log))
	const workers, rounds = 3, 6
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				r := e.run("run", "shared", "--", "sh", "-c", script)
				if r.code != 0 {
					t.Errorf("worker %d round %d: exit %d, stderr %q", w, i, r.code, r.stderr)
					return
				}
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*workers*rounds {
		t.Fatalf("%d log lines, want %d", len(lines), 2*workers*rounds)
	}
	last := 0
	for i := 0; i < len(lines); i += 2 {
		var a, z int
		if _, err := fmt.Sscanf(lines[i], "start %d", &a); err != nil {
			t.Fatalf("line %d: %q, want a start", i, lines[i])
		}
		if _, err := fmt.Sscanf(lines[i+1], "end %d", &z); err != nil || z != a {
			t.Fatalf("line %d: %q after %q: runs interleaved", i+1, lines[i+1], lines[i])
		}
		if a <= last {
			t.Fatalf("token %d after %d", a, last)
		}
		last = a
	}
}

// holdKey starts `distlock run KEY` with a command that records its pid and
// token and sleeps; it returns once the command runs.
func (e *env) holdKey(key, name string) (s *started, pid, token int) {
	e.t.Helper()
	pidFile, tokFile := e.path(name+".pid"), e.path(name+".token")
	s = e.start(e.command("run", key, "--", "sh", "-c",
		fmt.Sprintf(`echo $DISTLOCK_TOKEN > %s; echo $$ > %s; exec sleep 600`, sh(tokFile), sh(pidFile))))
	pid = readInt(e.t, pidFile)
	return s, pid, readInt(e.t, tokFile)
}

// SIGKILL of the holding distlock frees the lock at once: a waiting run
// gets it promptly, with a higher token, and the killed distlock's command
// does not go on running.
func TestKilledDistlockFreesLockAndKillsCommand(t *testing.T) {
	e := newEnv(t)
	a, childPid, tokA := e.holdKey("k", "a")
	// The fault bites: the lock is held.
	if r := e.run("run", "--no-wait", "k", "--", "true"); r.code != cli.ExitNotAcquired {
		t.Fatalf("--no-wait while held: exit %d, want %d", r.code, cli.ExitNotAcquired)
	}
	b := e.start(e.command("--verbose", "run", "--timeout", "1m", "k", "--", "sh", "-c", "echo $DISTLOCK_TOKEN"))
	waitFor(t, "the second run to wait", func() bool { return strings.Contains(b.stderr.String(), "acquiring") })
	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.wait(a)
	rb := e.wait(b)
	if at, ok := logTime(rb.stderr, "distlock: acquired"); ok {
		t.Logf("waiting run acquired the lock %v after SIGKILL of the holder", at.Sub(killed).Round(time.Millisecond))
	}
	if rb.code != 0 {
		t.Fatalf("waiting run: exit %d, stderr %q", rb.code, rb.stderr)
	}
	if tokB, err := strconv.Atoi(strings.TrimSpace(rb.stdout)); err != nil || tokB <= tokA {
		t.Errorf("waiting run's token %q, want above %d", rb.stdout, tokA)
	}
	waitGone(t, childPid)
}

// A signal to distlock goes to the command; the command's status is
// distlock's, and the lock is released afterwards.
func TestSignalsAreForwarded(t *testing.T) {
	e := newEnv(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		name := strings.ToLower(sig.String()[:3])
		pidFile, mark := e.path(name+".pid"), e.path(name+".mark")
		s := e.start(e.command("run", "k", "--", "sh", "-c", fmt.Sprintf(
			`trap 'echo got > %[1]s; exit 7' INT TERM HUP; echo $$ > %[2]s; while :; do sleep 0.02; done`, sh(mark), sh(pidFile))))
		pid := readInt(t, pidFile)
		if err := s.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		r := e.wait(s)
		if r.code != 7 {
			t.Errorf("%v: exit %d, want the command's 7; stderr %q", sig, r.code, r.stderr)
		}
		if b, _ := os.ReadFile(mark); string(b) != "got\n" {
			t.Errorf("%v: the command did not get the signal", sig)
		}
		waitGone(t, pid)
		if r := e.run("run", "--no-wait", "k", "--", "true"); r.code != 0 {
			t.Errorf("%v: lock not released after the command ended: exit %d, %q", sig, r.code, r.stderr)
		}
	}

	// A command that does not catch SIGTERM dies of it: 128+15.
	pidFile := e.path("plain.pid")
	s := e.start(e.command("run", "k", "--", "sh", "-c", fmt.Sprintf(`echo $$ > %s; exec sleep 600`, sh(pidFile))))
	readInt(t, pidFile)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if r := e.wait(s); r.code != 128+15 {
		t.Errorf("command killed by the forwarded SIGTERM: exit %d, want 143", r.code)
	}
}

// SIGINT while waiting for the lock ends the wait: 128+2, and the command
// never runs.
func TestInterruptWhileWaiting(t *testing.T) {
	e := newEnv(t)
	holder, _, _ := e.holdKey("k", "holder")
	mark := e.path("ran")
	w := e.start(e.command("--verbose", "run", "k", "--", "touch", mark))
	waitFor(t, "the waiter to wait", func() bool { return strings.Contains(w.stderr.String(), "acquiring") })
	w.cmd.Process.Signal(syscall.SIGINT)
	r := e.wait(w)
	if r.code != 130 || !strings.Contains(r.stderr, "interrupted") {
		t.Errorf("interrupted waiter: exit %d, stderr %q; want 130 and a message", r.code, r.stderr)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the command ran although the wait was interrupted")
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)
}

// --no-wait and --timeout on a held key: exit 75 with the holder named.
func TestNotAcquired(t *testing.T) {
	e := newEnv(t)
	holder, _, tok := e.holdKey("k", "holder")
	start := time.Now()
	r := e.run("run", "--no-wait", "k", "--", "true")
	t.Logf("--no-wait on a held key returned in %v", time.Since(start).Round(time.Millisecond))
	if r.code != cli.ExitNotAcquired || !strings.Contains(r.stderr, "held") || !strings.Contains(r.stderr, fmt.Sprintf("token %d", tok)) {
		t.Errorf("--no-wait: exit %d, stderr %q; want %d naming the holder's token", r.code, r.stderr, cli.ExitNotAcquired)
	}
	r = e.run("run", "--timeout", "100ms", "k", "--", "true")
	if r.code != cli.ExitNotAcquired || !strings.Contains(r.stderr, "timed out") {
		t.Errorf("--timeout: exit %d, stderr %q; want %d", r.code, r.stderr, cli.ExitNotAcquired)
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)
}

func TestExitStatus(t *testing.T) {
	e := newEnv(t)
	notExec := e.path("not-executable")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600)
	for _, tc := range []struct {
		argv []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "exit 125"}, 125},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"no-such-command-anywhere"}, cli.ExitNotFound},
		{[]string{e.path("missing")}, cli.ExitNotFound},
		{[]string{notExec}, cli.ExitCannotExec},
	} {
		r := e.run(append([]string{"run", "k", "--"}, tc.argv...)...)
		if r.code != tc.want {
			t.Errorf("%q: exit %d, want %d; stderr %q", tc.argv, r.code, tc.want, r.stderr)
		}
	}
	// Every path released the lock.
	if r := e.run("run", "--no-wait", "k", "--", "true"); r.code != 0 {
		t.Errorf("lock left held: exit %d, %q", r.code, r.stderr)
	}
}

// Bad input: exit 64 with a clear message; a password never appears.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	const secret = "s3cretpw"
	for _, tc := range []struct {
		args []string
		env  string // DISTLOCK_BACKEND, when set
		want string
	}{
		{args: []string{"run", "k", "true"}, want: `missing "--"`},
		{args: []string{"run", "k", "--"}, want: "missing the command"},
		{args: []string{"run", "--", "true"}, want: "missing KEY"},
		{args: []string{"run"}, want: "missing KEY"},
		{args: []string{"run", "a", "b", "--", "true"}, want: "one KEY"},
		{args: []string{"run", "", "--", "true"}, want: "invalid key: empty"},
		{args: []string{"run", "a\nb", "--", "true"}, want: "control character"},
		{args: []string{"run", strings.Repeat("k", 513), "--", "true"}, want: "invalid key"},
		{args: []string{"run", "--ttl", "abc", "k", "--", "true"}, want: "--ttl"},
		{args: []string{"run", "--ttl", "0", "k", "--", "true"}, want: "--ttl"},
		{args: []string{"run", "--ttl", "1ms", "k", "--", "true"}, want: "--ttl"},
		{args: []string{"run", "--timeout", "-1s", "k", "--", "true"}, want: "--timeout"},
		{args: []string{"run", "--grace", "-1s", "k", "--", "true"}, want: "--grace"},
		{args: []string{"run", "--no-wait", "--timeout", "1s", "k", "--", "true"}, want: "exclude"},
		{args: []string{"run", "--bogus", "k", "--", "true"}, want: "unknown flag"},
		{args: []string{"bogus"}, want: "unknown command"},
		{args: []string{}, want: "a command is required"},
		{args: []string{"status", "a", "b"}, want: "at most one PREFIX"},
		{args: []string{"--backend", "foo://x", "run", "k", "--", "true"}, want: `unknown scheme "foo"`},
		{args: []string{"--backend", "/var/locks", "run", "k", "--", "true"}, want: "file:///var/locks"},
		{args: []string{"--backend", "://nohost", "status"}, want: "malformed backend URL"},
		{args: []string{"--backend", "file://otherhost/x", "status"}, want: "not this host"},
		{args: []string{"--backend", "redlock://u:" + secret + "@h1:6379,h2:6379,h1:6379", "run", "k", "--", "true"}, want: "h1:6379 is named twice"},
		{args: []string{"--backend", "zk://u:" + secret + "@h1:2181?nope=1", "status"}, want: `unknown parameter "nope"`},
		{args: []string{"--backend", "postgres:u:" + secret + "@h/db", "--verbose", "status"}, want: "no host; want postgres://"},
		{args: []string{"--backend", "postgresql:///db?password=" + secret, "status"}, want: "no host; want postgresql://"},
		{args: []string{"--backend", "redis://user:" + secret + "@ho st:6379", "status"}, want: "malformed backend URL"},
		{args: []string{"--backend", "redis://user:" + secret[:3] + "/" + secret[3:] + "@host:port", "status"}, want: "malformed backend URL"},
		{args: []string{"--backend", "file://u:" + secret + "@/x", "status"}, want: "takes no user"},
	} {
		cmd := e.command(tc.args...)
		if tc.env != "" {
			cmd.Env = append(cmd.Env, "DISTLOCK_BACKEND="+tc.env)
		}
		r := e.wait(e.start(cmd))
		if r.code != cli.ExitUsage {
			t.Errorf("%q: exit %d, want %d; stderr %q", tc.args, r.code, cli.ExitUsage, r.stderr)
		}
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: stderr %q, want it to say %q", tc.args, r.stderr, tc.want)
		}
		if strings.Contains(r.stderr+r.stdout, secret[3:]) {
			t.Errorf("%q: output shows the password: %q", tc.args, r.stderr+r.stdout)
		}
	}
}

// An unreachable lock service: exit 69 with a clear message, promptly, and
// the password never shows.
func TestUnreachableService(t *testing.T) {
	e := newEnv(t)
	const secret = "s3cretpw"
	for _, tc := range []struct {
		args []string
		env  string
	}{
		{args: []string{"--backend", "redis://user:" + secret + "@127.0.0.1:1/0", "run", "k", "--", "true"}},
		{args: []string{"--backend", "rediss://:" + secret + "@127.0.0.1:1", "--verbose", "status"}},
		{args: []string{"--backend", "etcd://u:" + secret + "@127.0.0.1:1", "run", "k", "--", "true"}},
		{args: []string{"run", "k", "--", "true"}, env: "redis+sentinel://u:" + secret + "@127.0.0.1:1,127.0.0.1:2/mymaster"},
	} {
		cmd := e.command(tc.args...)
		if tc.env != "" {
			cmd.Env = append(cmd.Env, "DISTLOCK_BACKEND="+tc.env)
		}
		r := e.wait(e.start(cmd))
		if r.code != cli.ExitUnavailable {
			t.Errorf("%q: exit %d, want %d; stderr %q", tc.args, r.code, cli.ExitUnavailable, r.stderr)
		}
		if !strings.Contains(r.stderr, "unavailable") || !strings.Contains(r.stderr, "xxxxx") {
			t.Errorf("%q: stderr %q, want it to say the service is unavailable, with the URL redacted", tc.args, r.stderr)
		}
		if strings.Contains(r.stderr+r.stdout, secret) {
			t.Errorf("%q: output shows the password: %q", tc.args, r.stderr+r.stdout)
		}
	}
}

// The message about an unreachable service shows its URL as given, less
// the user information, even when the user is named like the URL's
// scheme, host or database (a user name that is also one of those parts
// is not taken for a password where the message names that part).
func TestUnreachableServiceShowsURL(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ url, shown string }{
		{"postgres://postgres@127.0.0.1:1/postgres?connect_timeout=5", "postgres://xxxxx@127.0.0.1:1/postgres?connect_timeout=5"},
		{"postgres://localhost@localhost:1/db?connect_timeout=5", "postgres://xxxxx@localhost:1/db?connect_timeout=5"},
		{"redis://redis@127.0.0.1:1/0", "redis://xxxxx@127.0.0.1:1/0"},
	} {
		r := e.run("--backend", tc.url, "status")
		if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, tc.shown) {
			t.Errorf("status on %s: exit %d, stderr %q; want %d naming %s", tc.url, r.code, r.stderr, cli.ExitUnavailable, tc.shown)
		}
	}
}

// status lists the holder of a key with its token, as a table and as JSON.
func TestStatus(t *testing.T) {
	e := newEnv(t)
	if r := e.run("status"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no lock held on ") {
		t.Errorf("status with nothing held: exit %d, stdout %q, stderr %q; want nothing on stdout, a note on stderr", r.code, r.stdout, r.stderr)
	}
	if r := e.run("status", "jobs/"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, `no lock held under "jobs/"`) {
		t.Errorf("status jobs/ with nothing held: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	holder, _, tok := e.holdKey("jobs/a", "holder")
	r := e.run("status")
	if r.code != 0 || !strings.Contains(r.stdout, "KEY") || !strings.Contains(r.stdout, fmt.Sprintf("jobs/a  %d ", tok)) ||
		!strings.Contains(r.stdout, "unbounded") {
		t.Errorf("status: exit %d, stdout %q; want jobs/a with token %d", r.code, r.stdout, tok)
	}
	r = e.run("status", "--json", "jobs/")
	var hs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &hs); err != nil || r.code != 0 {
		t.Fatalf("status --json: exit %d, %v, stdout %q", r.code, err, r.stdout)
	}
	if len(hs) != 1 || hs[0]["key"] != "jobs/a" || hs[0]["token"] != fmt.Sprint(tok) ||
		!strings.Contains(fmt.Sprint(hs[0]["owner"]), ":") || hs[0]["since"] == nil || hs[0]["expires"] != nil {
		t.Errorf("status --json = %v; want jobs/a, token %d, an owner, a start, no expiry", hs, tok)
	}
	if r := e.run("status", "--json", "other/"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("status --json other/: exit %d, stdout %q; want []", r.code, r.stdout)
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)
	if r := e.run("status"); r.code != 0 || r.stdout != "" {
		t.Errorf("status after release: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestVersionAndHelp(t *testing.T) {
	e := newEnv(t)
	if r := e.run("--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "distlock ") {
		t.Errorf("--version: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := e.run("--help"); r.code != 0 || !strings.Contains(r.stdout, "redis+sentinel://") || !strings.Contains(r.stdout, "etcds://") {
		t.Errorf("--help does not list the lock services: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := e.run("run", "--help"); r.code != 0 || !strings.Contains(r.stdout, "DISTLOCK_TOKEN") {
		t.Errorf("run --help: exit %d, stdout %q", r.code, r.stdout)
	}
}

// logTime returns the time of the first log line of distlock --verbose
// with msg.
func logTime(log, msg string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "msg=\""+msg+"\"") {
			continue
		}
		ts, ok := strings.CutPrefix(strings.Fields(line)[0], "time=")
		if !ok {
			return time.Time{}, false
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		return at, err == nil
	}
	return time.Time{}, false
}
