package election_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/memlock"
)

// A leader frozen past its TTL (a GC pause, a stopped VM: it renews
// nothing) has its term's context cancelled before another candidate's
// Campaign returns; when it wakes, it writes with its old term's token.
// Without a fence that late write overwrites the new leader's (the
// baseline, which must bite); with one, the storage refuses it.
func TestFrozenLeaderIsFenced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fenced bool
	}{
		{"unfenced", false},
		{"fenced", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				frozenLeader(t, tc.fenced)
			})
		})
	}
}

func frozenLeader(t *testing.T, fenced bool) {
	ctx := context.Background()
	srv := memlock.New()
	frozen := distlocktest.NewFaulty(srv) // A's way to the service
	newElection := func(b driver.Backend) *election.Election {
		c, err := distlock.New(b, distlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		e, err := election.New(c, "payments/leader")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ea, eb := newElection(frozen), newElection(srv)

	// The storage: one record, written by the leader.
	var record string
	reg := fence.NewRegister()
	write := func(term *election.Term, value string) error {
		if !fenced {
			record = value
			return nil
		}
		return reg.Do("record", term.Token(), func() error { record = value; return nil })
	}

	ta, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.Err(); err != nil { // A checks that it leads...
		t.Fatalf("A's term: %v", err)
	}
	frozen.Partition() // ...and freezes: nothing of it reaches the service

	tb, err := eb.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if ta.Context().Err() == nil {
		t.Fatalf("B's Campaign returned (term %d) while A's term %d's context lived", tb.Token(), ta.Token())
	}
	if !errors.Is(ta.Err(), distlock.ErrLockLost) {
		t.Errorf("A's Err() = %v, want ErrLockLost", ta.Err())
	}
	if tb.Token() <= ta.Token() {
		t.Fatalf("term %d after term %d", tb.Token(), ta.Token())
	}
	if err := write(tb, "b"); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	frozen.Heal() // A wakes, and writes as the leader it was
	err = write(ta, "a")
	if !fenced {
		if err != nil || record != "a" {
			t.Fatalf("unfenced late write: %v, record %q; the baseline should let it overwrite B's", err, record)
		}
		return
	}
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("fenced late write: %v, want ErrStaleToken", err)
	}
	if record != "b" {
		t.Errorf("record = %q, want B's", record)
	}
	if err := tb.Resign(ctx); err != nil {
		t.Errorf("B's Resign: %v", err)
	}
}
