//go:build linux

package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// runInProcess runs distlock in this process over srv (as mem://), so that
// the test can make the lock service drop the grant.
func runInProcess(ctx context.Context, srv *memlock.Backend, stderr io.Writer, args ...string) <-chan int {
	code := make(chan int, 1)
	open := func(context.Context, string) (driver.Backend, io.Closer, error) { return srv, io.NopCloser(nil), nil }
	go func() {
		code <- cli.Run(ctx, append([]string{"--backend", "mem://"}, args...),
			cli.WithOpener("mem", open), cli.WithStdio(strings.NewReader(""), io.Discard, stderr))
	}()
	return code
}

func waitCode(t *testing.T, code <-chan int) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(time.Minute):
		t.Fatal("distlock did not return in a minute")
		return 0
	}
}

// A command that outlives its lock is terminated: SIGTERM first, once,
// SIGKILL after --grace if it ignores SIGTERM, or at the lock's deadline
// if that comes first (the supervisor's, which sends no SIGTERM of its
// own then); distlock exits 76 and says why.
func TestLostLockTerminatesCommand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		trap  string // the command's reaction to SIGTERM
		grace string
		ended string // how distlock says the command ended
	}{
		{"ObeysSIGTERM", `echo TERM >> %[1]s; exit 0`, "300ms", "exited with status 0"},
		{"IgnoresSIGTERM", `echo TERM >> %[1]s`, "300ms", "killed by signal 9"},
		// The deadline (under --ttl away) comes before the grace ends:
		// the supervisor's SIGTERM before it would be a second one.
		{"IgnoresSIGTERMGraceBeyondDeadline", `echo TERM >> %[1]s`, "1m", "killed by signal 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile, mark := dir+"/pid", dir+"/mark"
			srv := memlock.New()
			var stderr syncBuffer
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("distlock's stderr: %q", stderr.String())
				}
			})
			script := fmt.Sprintf(`trap '`+tc.trap+`' TERM; echo $$ > %[2]s; while :; do sleep 0.02; done`, sh(mark), sh(pidFile))
			// A lease long enough that a late renewal under load does not
			// make the supervisor end the command before the loss (its
			// at-risk window, 2s, is how late a renewal may be).
			code := runInProcess(context.Background(), srv, &stderr,
				"run", "--ttl", "6s", "--grace", tc.grace, "jobs/k", "--", "sh", "-c", script)
			pid := readInt(t, pidFile)
			if !alive(pid) {
				t.Fatal("the command is not running")
			}
			if !srv.Revoke("jobs/k") {
				t.Fatal("Revoke: no grant to revoke")
			}
			if c := waitCode(t, code); c != cli.ExitLockLost {
				t.Errorf("exit %d, want %d; stderr %q", c, cli.ExitLockLost, stderr.String())
			}
			msg := stderr.String()
			for _, want := range []string{"lost the lock", "jobs/k", "SIGTERM", tc.ended} {
				if !strings.Contains(msg, want) {
					t.Errorf("stderr %q does not say %q", msg, want)
				}
			}
			if n := strings.Count("\n"+msg, "\ndistlock:"); n != 1 { // the command's shell may say "Terminated"
				t.Errorf("stderr has %d lines, want the loss said once: %q", n, msg)
			}
			if b, _ := os.ReadFile(mark); string(b) != "TERM\n" {
				t.Errorf("the command's record of signals: %q, want one SIGTERM; stderr %q", b, msg)
			}
			waitGone(t, pid)
		})
	}
}

// Cancelling Run's context while the command runs terminates it and
// releases the lock.
func TestRunContextCancelled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := memlock.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	code := runInProcess(ctx, srv, &stderr, "run", "k", "--", "sh", "-c",
		fmt.Sprintf(`echo $$ > %s; exec sleep 600`, sh(dir+"/pid")))
	pid := readInt(t, dir+"/pid")
	if hs, _ := srv.List(context.Background(), "k"); len(hs) != 1 {
		t.Fatalf("holders while the command runs: %v", hs)
	}
	cancel()
	if c := waitCode(t, code); c != 128+15 {
		t.Errorf("exit %d, want 143 (the command got SIGTERM); stderr %q", c, stderr.String())
	}
	waitGone(t, pid)
	if hs, _ := srv.List(context.Background(), "k"); len(hs) != 0 {
		t.Errorf("holders after the run: %v", hs)
	}
}
