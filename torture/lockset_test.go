package torture_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/torture"
)

// A worker's lock set is recorded as one grant per part, with the part's
// token on the writes that name it and a release per part; a set that
// cannot be had leaves none of its parts held (all or nothing), on the
// file backend, through worker processes as the nemesis mode runs them.
func TestLockSetRecorded(t *testing.T) {
	r := torture.NewRun(t, torture.Fenced)
	defer r.Close()
	tg := torture.Target{Kind: "file", Dir: t.TempDir()}
	open := func(name string) *torture.Worker {
		w := r.Spawn(name)
		if err := w.Open(torture.OpenOptions{Backend: tg.Kind, URL: tg.URL(), TTL: 5 * time.Second}, r.Store.Addr()); err != nil {
			t.Fatal(err)
		}
		return w
	}
	s, b, c := open("S"), open("B"), open("C")

	// S holds {a, b}, asked out of order; it writes each part's resource.
	tokens, err := s.AcquireAll([]string{"set/b", "set/a"}, torture.Acq{Wait: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 2 || tokens["set/a"] == 0 || tokens["set/b"] == 0 {
		t.Fatalf("tokens %v", tokens)
	}
	for _, k := range []string{"set/a", "set/b"} {
		if res := s.RMW("res-"+k, torture.RMWOptions{Key: k}); res.Err != nil || res.Outcome != "ok" {
			t.Fatalf("write of part %s: %+v", k, res)
		}
	}
	// A write that names no part of the set is refused by the worker.
	if res := s.RMW("res-x", torture.RMWOptions{Key: "set/x"}); res.Err == nil {
		t.Fatal("a write naming no part of the set went out")
	}
	// B asks {b, c} without waiting while S holds b (b sorts first: B
	// fails on it), then {c, d} while C holds d (B takes c, fails on d,
	// and must give c back).
	if _, err := c.Acquire("set/d", torture.Acq{Wait: false}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireAll([]string{"set/b", "set/c"}, torture.Acq{Wait: false, Timeout: 10 * time.Second}); torture.ErrKind(err) != "not-acquired" {
		t.Fatalf("set with a held part: %v", err)
	}
	if _, err := b.AcquireAll([]string{"set/d", "set/c"}, torture.Acq{Wait: false, Timeout: 10 * time.Second}); torture.ErrKind(err) != "not-acquired" {
		t.Fatalf("set with a held last part: %v", err)
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireAll([]string{"set/c", "set/a"}, torture.Acq{Wait: false, Timeout: 10 * time.Second}); err != nil {
		t.Fatalf("c, left by B's failed set, and a, released by S's set: %v", err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}

	res := r.Check(&torture.Result{Backend: tg.Kind, Scenario: "lockset", Mode: torture.Fenced, Expect: torture.ExpectHold}, "")
	if res.Bit() {
		t.Fatalf("the checkers found %s", res.Outcome())
	}
	grantOf := map[string]torture.Op{} // S's part grants, by key
	var releases, ends []string
	for _, op := range res.Ops {
		switch {
		case op.Kind == torture.KindAcquire && op.Worker == "S":
			if !strings.HasPrefix(op.Note, "part of a lock set of 2") {
				t.Errorf("S's grant of %s noted %q", op.Key, op.Note)
			}
			grantOf[op.Key] = op
		case op.Kind == torture.KindRelease && op.Worker == "S" && op.Outcome == torture.OutcomeOK:
			releases = append(releases, op.Key)
		case op.Kind == torture.KindEnd && op.Worker == "S":
			ends = append(ends, op.Key)
		}
	}
	if len(grantOf) != 2 || grantOf["set/a"].Token != tokens["set/a"] || grantOf["set/b"].Token != tokens["set/b"] || grantOf["set/a"].Grant == grantOf["set/b"].Grant {
		t.Fatalf("S's grants %+v, tokens %v", grantOf, tokens)
	}
	slices.Sort(releases)
	slices.Sort(ends)
	if want := []string{"set/a", "set/b"}; !slices.Equal(releases, want) || !slices.Equal(ends, want) {
		t.Errorf("releases %v, ends %v; want one of each per part", releases, ends)
	}
	writes := 0
	for _, op := range res.Ops {
		if op.Kind != torture.KindWrite || !strings.HasPrefix(op.Key, "res-set/") {
			continue
		}
		writes++
		k := strings.TrimPrefix(op.Key, "res-")
		if op.Token != tokens[k] || op.Outcome != torture.OutcomeOK {
			t.Errorf("write of %s: token %d outcome %s, want the part's token %d", op.Key, op.Token, op.Outcome, tokens[k])
		}
	}
	if writes != 2 {
		t.Errorf("%d writes of the parts' resources recorded, want 2", writes)
	}
}
