//go:build linux

package cli_test

import (
	"encoding/json"
	"syscall"
	"testing"

	"github.com/distlock/distlock/testserver"
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
// giving up. And a release (a resignation) of a lock (a term) that an
// operator forced away, before any keepalive told the client, says it
// was not held, not released.
func TestPythonClientKeepaliveDuringRelease(t *testing.T) {
	e := newEnv(t)
	s := e.serve("--allow-force-release")
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
		Forced     string
		ForcedTerm string `json:"forced_term"`
		Errors     []*string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Lock != "released" || got.Term != "resigned" || len(got.Told) != 0 {
		t.Errorf("a release and a resignation with a keepalive between the answer and its reading: %s; want released, resigned, and no loss told", out)
	}
	if got.Forced != "not_held" || got.ForcedTerm != "not_held" || len(got.Errors) != 2 || got.Errors[0] == nil || got.Errors[1] == nil ||
		*got.Errors[0] != "not-held" || *got.Errors[1] != "not-held" {
		t.Errorf("a release and a resignation of a lock and a term forced away: %s; want both lost as not_held, each raising not-held", out)
	}
}

// The Python client holds a lock of a gateway over ZooKeeper, whose
// locks last 5/12 of the gateway's session timeout (about 4.2s), less than
// a quarter of the client's session TTL (15s) allows a keepalive to wait:
// its keepalives wait at most a third of the lock's time left in the
// answer before, so that each answer renews the lock before it runs out,
// and the lock is never lost. (How often valid() said no is logged, not
// judged: a machine that stalls the client longer than the lock's time
// left makes it say no, rightly.)
func TestPythonClientHoldsAZooKeeperLock(t *testing.T) {
	e := newEnv(t)
	z := testserver.StartZooKeeper(t)
	s := e.serveCmd(e.command("--backend", "zk://"+z.ConnectString()+"/locks", "serve", "--listen", "127.0.0.1:0"))
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	out, err := python(t, "hold", s.url, e.tmp).Output()
	if err != nil {
		t.Fatalf("python3 e2e.py hold: %v\n%s", err, stderrOf(err))
	}
	var got struct {
		Samples, Invalid, Checked int
		Lost                      *string
		Told                      []string
		Over                      [][2]int
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("python: %s", out)
	switch {
	case got.Checked < 2:
		t.Errorf("only %d keepalives checked while the lock was held 8s: %s", got.Checked, out)
	case len(got.Over) != 0:
		t.Errorf("keepalives waited longer than a third of the lock's time left ([wait ms, time left ms]): %v", got.Over)
	case got.Lost != nil || len(got.Told) != 0:
		t.Errorf("a lock held for 8s through a gateway over ZooKeeper was lost: %s", out)
	}
}
