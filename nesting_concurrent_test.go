package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// Goroutines take locks and sets under one another's contexts, release
// them and revoke keys, all at once. When they are done: every lock and set
// whose Err is not nil has its context ended and vice versa, no live one
// keeps ended ones to end, a lock released or lost never reports nil, and
// after the releases and Close the service holds nothing.
func TestConcurrentNesting(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { concurrentNesting(t, seed) })
	}
}

type cnode struct {
	lock *distlock.Lock
	set  *distlock.LockSet
}

func (n cnode) ctx() context.Context {
	if n.set != nil {
		return n.set.Context()
	}
	return n.lock.Context()
}

func (n cnode) err() error {
	if n.set != nil {
		return n.set.Err()
	}
	return n.lock.Err()
}

func concurrentNesting(t *testing.T, seed uint64) {
	ctx := context.Background()
	srv := memlock.New()
	c, err := distlock.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var mu sync.Mutex
	var nodes []cnode
	var released []cnode // released by the test: Err must stay non-nil
	pick := func(r *rand.Rand) (context.Context, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(nodes) == 0 || r.IntN(3) == 0 {
			return ctx, true
		}
		return nodes[r.IntN(len(nodes))].ctx(), true
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range 60 {
				switch op := r.IntN(10); {
				case op < 4:
					pctx, _ := pick(r)
					if l, err := c.TryAcquire(pctx, keys[r.IntN(len(keys))]); err == nil {
						mu.Lock()
						nodes = append(nodes, cnode{lock: l})
						mu.Unlock()
					}
				case op < 6:
					pctx, _ := pick(r)
					ks := []string{keys[r.IntN(len(keys))], keys[r.IntN(len(keys))]}
					if s, err := c.AcquireAll(pctx, ks, distlock.WithWait(false)); err == nil {
						mu.Lock()
						nodes = append(nodes, cnode{set: s})
						mu.Unlock()
					}
				case op < 9:
					mu.Lock()
					if len(nodes) == 0 {
						mu.Unlock()
						continue
					}
					i := r.IntN(len(nodes))
					n := nodes[i]
					nodes = append(nodes[:i], nodes[i+1:]...)
					released = append(released, n)
					mu.Unlock()
					if n.set != nil {
						n.set.Release(ctx)
					} else {
						n.lock.Release(ctx)
					}
					if n.err() == nil {
						t.Errorf("released, Err nil")
					}
					if n.ctx().Err() == nil && n.set != nil {
						t.Errorf("released set, context live")
					}
				default:
					srv.Revoke(keys[r.IntN(len(keys))])
				}
			}
		})
	}
	wg.Wait()
	// A released handle says so, but its context is its grant's, which
	// other (reentrant) handles may still hold: only sets are compared.
	all := slices.Clone(nodes)
	for _, n := range released {
		if n.set != nil {
			all = append(all, n)
		}
	}
	for _, n := range all {
		e, done := n.err(), n.ctx().Err() != nil
		if (e != nil) != done {
			t.Errorf("Err %v, context ended %v", e, done)
		}
		if !done {
			stale := 0
			if n.set != nil {
				stale = distlock.SetStaleKids(n.set)
			} else {
				stale = distlock.StaleKids(n.lock)
			}
			if stale > 0 {
				t.Errorf("live lock or set keeps %d ended ones", stale)
			}
		}
		if e != nil && n.lock != nil && !errors.Is(e, distlock.ErrLockLost) && !errors.Is(e, distlock.ErrReleased) && !errors.Is(e, distlock.ErrEnclosingEnded) {
			t.Errorf("lock Err %v", e)
		}
	}
	for _, n := range released {
		if n.err() == nil {
			t.Errorf("released, Err back to nil")
		}
	}
	for _, n := range nodes {
		if n.set != nil {
			n.set.Release(ctx)
		} else {
			n.lock.Release(ctx)
		}
	}
	if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
		t.Errorf("left behind after every release: %+v", hs)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}
