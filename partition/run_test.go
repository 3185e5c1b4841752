package partition_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/partition"
)

func TestNewRefuses(t *testing.T) {
	c, err := distlock.New(memlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tc := range []struct {
		name  string
		group string
		units []string
		opts  []partition.Option
		want  error
	}{
		{"empty group", "", partition.Count(2), nil, distlock.ErrInvalidKey},
		{"group with control", "g\x01", partition.Count(2), nil, distlock.ErrInvalidKey},
		{"no units", "g", nil, nil, distlock.ErrInvalidOption},
		{"empty unit", "g", []string{"a", ""}, nil, distlock.ErrInvalidKey},
		{"unit with slash", "g", []string{"a/b"}, nil, distlock.ErrInvalidKey},
		{"unit twice", "g", []string{"a", "a"}, nil, distlock.ErrInvalidOption},
		{"unit with control", "g", []string{"a\x01"}, nil, distlock.ErrInvalidKey},
		{"member with slash", "g", partition.Count(2), []partition.Option{partition.WithMember("a/b")}, distlock.ErrInvalidKey},
		{"long member", "g", partition.Count(2), []partition.Option{partition.WithMember(strings.Repeat("m", distlock.MaxKeyLen))}, distlock.ErrInvalidKey},
		{"zero reconcile", "g", partition.Count(2), []partition.Option{partition.WithReconcile(0)}, distlock.ErrInvalidOption},
		{"negative hold", "g", partition.Count(2), []partition.Option{partition.WithMinHold(-time.Second)}, distlock.ErrInvalidOption},
		{"too many units", "g", partition.Count(partition.MaxUnits + 1), nil, distlock.ErrInvalidOption},
	} {
		if _, err := partition.New(c, tc.group, tc.units, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("%s: New: %v; want %v", tc.name, err, tc.want)
		}
	}
	if _, err := partition.New(nil, "g", partition.Count(1)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	p, err := partition.New(c, "a/b", partition.Count(1))
	if err != nil {
		t.Fatalf("a group with a slash: %v", err)
	}
	if p.Member() == "" || strings.Contains(p.Member(), "/") {
		t.Fatalf("default member id %q", p.Member())
	}
	if err := p.Run(context.Background(), nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("Run(nil): %v", err)
	}
}

// WithSemaphore among the lock options would make every unit a permit,
// which two members could hold at once: Run refuses it.
func TestRunRefusesSemaphore(t *testing.T) {
	c, err := distlock.New(memlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p, err := partition.New(c, "g", partition.Count(2),
		partition.WithLockOptions(distlock.WithSemaphore(distlock.Semaphore{Limit: 2})))
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background(), func(context.Context, partition.Unit) error {
		t.Error("fn called")
		return nil
	})
	if !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("Run with WithSemaphore: %v; want ErrInvalidOption", err)
	}
	if hs, err := c.List(context.Background(), ""); err != nil || len(hs) != 0 {
		t.Fatalf("left behind: %v, %v", hs, err)
	}
}

// A unit's fn that fails ends Run with its error, after every unit of the
// member was ended (its fn saw ErrLeft) and released: the other member
// takes them all.
func TestFnErrorEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, 8)
		a := g.join("a")
		g.settle(1, ttl)
		c, err := distlock.New(g.srv, distlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := partition.New(c, "billing", g.units, partition.WithMember("b"),
			partition.WithReconcile(reconcile), partition.WithMinHold(0))
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		granted := make(chan string, 8)
		var causes []error
		var mu sync.Mutex
		err = p.Run(context.Background(), func(ctx context.Context, u partition.Unit) error {
			granted <- u.Name
			if len(granted) == 4 {
				return boom
			}
			<-ctx.Done()
			mu.Lock()
			causes = append(causes, context.Cause(ctx))
			mu.Unlock()
			return nil
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Run: %v; want boom", err)
		}
		mu.Lock()
		for _, c := range causes {
			if !errors.Is(c, partition.ErrLeft) {
				t.Errorf("a unit's context ended by %v; want ErrLeft", c)
			}
		}
		mu.Unlock()
		g.settle(1, ttl)
		a.cancel()
		<-a.done
	})
}

// A unit planned to a member that joins is given up by its owner: the
// owner's fn sees ErrMoved, and the joiner is granted the unit without
// waiting out a TTL.
func TestPlannedMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, 1)
		srv := g.srv
		var ended time.Time
		var cause error
		var mu sync.Mutex
		newMember := func(id string) *partition.Partition {
			c, err := distlock.New(srv, distlock.WithTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(context.Background()) })
			p, err := partition.New(c, "g", []string{"only"}, partition.WithMember(id),
				partition.WithReconcile(reconcile), partition.WithMinHold(0))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		// Which of two ids the assignment gives the unit to.
		winner := partition.Assign("g", []string{"x", "y"}, []string{"only"})["only"]
		loser := map[string]string{"x": "y", "y": "x"}[winner]
		pl := newMember(loser)
		grantedL := make(chan struct{})
		ctxL, stopL := context.WithCancel(context.Background())
		defer stopL()
		doneL := make(chan error, 1)
		go func() {
			doneL <- pl.Run(ctxL, func(ctx context.Context, u partition.Unit) error {
				close(grantedL)
				<-ctx.Done()
				mu.Lock()
				ended, cause = time.Now(), context.Cause(ctx)
				mu.Unlock()
				return nil
			})
		}()
		<-grantedL
		pw := newMember(winner)
		doneW := make(chan error, 1)
		grantedW := make(chan time.Time, 1)
		ctxW, stopW := context.WithCancel(context.Background())
		defer stopW()
		go func() {
			doneW <- pw.Run(ctxW, func(ctx context.Context, u partition.Unit) error {
				grantedW <- time.Now()
				<-ctx.Done()
				return nil
			})
		}()
		at := <-grantedW
		mu.Lock()
		if !errors.Is(cause, partition.ErrMoved) {
			t.Errorf("the old owner's context ended by %v; want ErrMoved", cause)
		}
		if wait := at.Sub(ended); wait < 0 || wait > reconcile {
			t.Errorf("the new owner was granted %v after the old owner's fn returned", wait)
		}
		mu.Unlock()
		stopW()
		stopL()
		<-doneW
		<-doneL
	})
}
