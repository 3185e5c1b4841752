//go:build linux

package cli_test

import (
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
)

// keepaliveEnd is what e2e.py's refused and broken modes print: how the
// holder learned that its keepalive thread ended the session.
type keepaliveEnd struct {
	Lost        string
	Told        []string
	Session     string
	Error       string
	Status      *int
	TimeLeft    float64 `json:"time_left"`
	TTL         float64
	NextAcquire string `json:"next_acquire"`
	FreeAfter   bool   `json:"free_after"`
}

func runKeepaliveEnd(t *testing.T, args ...string) keepaliveEnd {
	t.Helper()
	out, err := python(t, args...).Output()
	if err != nil {
		t.Fatalf("python3 e2e.py %s: %v\n%s", args[0], err, stderrOf(err))
	}
	var got keepaliveEnd
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return got
}

// checkEnded checks that the lock was reported lost for why, through
// lock.lost, on_lost and the session, before its deadline, and that the
// session refuses the next acquire.
func checkEnded(t *testing.T, got keepaliveEnd, why string) {
	t.Helper()
	if !strings.HasPrefix(got.Lost, why) || len(got.Told) != 1 || got.Told[0] != got.Lost || got.Session != got.Lost {
		t.Errorf("lost %q, told %q, session %q: want %q through all three", got.Lost, got.Told, got.Session, why)
	}
	if got.TimeLeft < got.TTL/2 {
		t.Errorf("the loss came %.1fs before the deadline, TTL %.0fs: it was the deadline, not the report", got.TimeLeft, got.TTL)
	}
	if got.NextAcquire != "session-ended" {
		t.Errorf("next acquire in the session: %q, want SessionGone (session-ended)", got.NextAcquire)
	}
}

// A keepalive that the gateway refuses for good (the token was rotated
// away) ends the session at once, and says so.
func TestPythonClientReportsARefusedKeepalive(t *testing.T) {
	e := newEnv(t)
	const secret = "python-keepalive-token-0123"
	path := e.path("tokens.json")
	if err := os.WriteFile(path, []byte(`{"tokens":[{"name":"py","token":"`+secret+`","prefixes":["e2e/"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := e.serve("--tokens", path)
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	got := runKeepaliveEnd(t, "refused", s.url, e.tmp, secret)
	checkEnded(t, got, "refused")
	if got.Status == nil || *got.Status != 401 || got.Error != "GatewayError" {
		t.Errorf("session.error: %s status %v, want a GatewayError with status 401", got.Error, got.Status)
	}
}

// A keepalive thread that fails in the process ends the session (deleting
// it at the gateway) and says so, instead of ending silently.
func TestPythonClientReportsAFailedKeepaliveThread(t *testing.T) {
	e := newEnv(t)
	s := e.serve()
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	got := runKeepaliveEnd(t, "broken", s.url, e.tmp)
	checkEnded(t, got, "keepalive_failed")
	if got.Error != "KeyError" {
		t.Errorf("session.error: %s, want the KeyError that ended the thread", got.Error)
	}
	if !got.FreeAfter {
		t.Errorf("the lock was not free for another session after the failed session was deleted")
	}
}
