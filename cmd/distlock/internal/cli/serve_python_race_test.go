//go:build linux

package cli_test

import (
	"encoding/json"
	"syscall"
	"testing"
)

// A keepalive of the Python client answered before a grant, and read after
// the grant's answer, does not list the new lock: the client must not take
// that for a loss.
func TestPythonClientKeepaliveBeforeGrant(t *testing.T) {
	e := newEnv(t)
	s := e.serve()
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	out, err := python(t, "race", s.url, e.tmp).Output()
	if err != nil {
		t.Fatalf("python3 e2e.py race: %v\n%s", err, stderrOf(err))
	}
	var got struct {
		Token          uint64 `json:"token,string"`
		Valid          bool
		Lost           *string
		ValidAfterNext bool `json:"valid_after_next"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !got.Valid || got.Lost != nil || !got.ValidAfterNext {
		t.Errorf("a lock granted after the keepalive was answered: %s", out)
	}
}

// A keepalive of the Python client answered after the gateway took a
// lock (or a term) from the session for its holder's release, and read
// before the release's answer, does not list the lock: the client must
// not report that as a loss (on_lost "not_held") of a lock its holder is
// giving up.
func TestPythonClientKeepaliveDuringRelease(t *testing.T) {
	e := newEnv(t)
	s := e.serve()
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	out, err := python(t, "release", s.url, e.tmp).Output()
	if err != nil {
		t.Fatalf("python3 e2e.py release: %v\n%s", err, stderrOf(err))
	}
	var got struct {
		Lock, Term string
		Told       []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Lock != "released" || got.Term != "resigned" || len(got.Told) != 0 {
		t.Errorf("a release and a resignation with a keepalive between the answer and its reading: %s; want released, resigned, and no loss told", out)
	}
}
