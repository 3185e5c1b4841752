package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// Random locks and sets taken under one another's contexts, by two Clients
// of one service, with reentered keys, releases and losses. After every
// step the lock contexts and Err agree with a model: a hold or set has
// ended exactly when it was released, lost, or when one of the locks or
// sets it was taken under ended. The service holds exactly the model's
// live grants, and no held lock keeps an ended one among those it ends.
func TestRandomNesting(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomNesting(t, seed) })
	}
}

// mnode is a modelled hold (a grant, shared by its reentrant handles) or
// set.
type mnode struct {
	name    string
	key     string // holds
	token   uint64 // holds
	client  int    // holds
	enders  []*mnode
	handles int  // holds: handles not yet released
	lost    bool // holds: revoked by the service
	set     *distlock.LockSet
	parts   []*mnode // sets
	freed   bool     // sets: released
	first   *distlock.Lock
	open    []*distlock.Lock // holds: the handles not yet released
}

// drop notes that handle l of hold n was released.
func (n *mnode) drop(l *distlock.Lock) {
	n.handles--
	n.open = slices.DeleteFunc(n.open, func(o *distlock.Lock) bool { return o == l })
}

func (n *mnode) ended() bool {
	if n.lost || n.freed || (n.set == nil && n.handles == 0) {
		return true
	}
	for _, e := range n.enders {
		if e.ended() {
			return true
		}
	}
	return false
}

func (n *mnode) ctx() context.Context {
	if n.set != nil {
		return n.set.Context()
	}
	return n.first.Context()
}

func (n *mnode) err() error {
	if n.set != nil {
		return n.set.Err()
	}
	if len(n.open) > 0 {
		return n.open[0].Err() // a released handle reports ErrReleased
	}
	return n.first.Err()
}

// handle is one Lock handle (or set) the test may release once.
type handle struct {
	node *mnode
	lock *distlock.Lock
	done bool
}

func randomNesting(t *testing.T, seed uint64) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(seed, 1))
		srv := memlock.New()
		clients := []*distlock.Client{newClient(t, srv), newClient(t, srv)}
		keys := []string{"a", "b", "c", "d", "e"}
		var nodes []*mnode
		var handles []*handle
		holdOf := func(c int, l *distlock.Lock) *mnode {
			for _, n := range nodes {
				if n.set == nil && n.client == c && n.key == l.Key() && n.token == l.Token() {
					return n
				}
			}
			return nil
		}
		// under picks the context of a random node, or the root (nil).
		under := func() (context.Context, *mnode) {
			if len(nodes) == 0 || r.IntN(3) == 0 {
				return ctx, nil
			}
			n := nodes[r.IntN(len(nodes))]
			return n.ctx(), n
		}
		enders := func(p *mnode) []*mnode {
			if p == nil {
				return nil
			}
			return []*mnode{p}
		}
		// grant records a lock handle from client c taken under p (its
		// first ender if it is a new grant) and returns its node.
		grant := func(c int, l *distlock.Lock, p *mnode, what string) *mnode {
			n := holdOf(c, l)
			if n == nil {
				n = &mnode{name: what, key: l.Key(), token: l.Token(), client: c, enders: enders(p), first: l}
				nodes = append(nodes, n)
			}
			n.handles++
			n.open = append(n.open, l)
			return n
		}
		var log []string
		for step := range 40 {
			c := r.IntN(len(clients))
			switch op := r.IntN(10); {
			case op < 4:
				pctx, p := under()
				key := keys[r.IntN(len(keys))]
				l, err := clients[c].TryAcquire(pctx, key)
				log = append(log, fmt.Sprintf("%d: c%d TryAcquire %s under %v: %v", step, c, key, name(p), err))
				if err == nil {
					handles = append(handles, &handle{node: grant(c, l, p, fmt.Sprintf("c%d:%s@%d", c, key, l.Token())), lock: l})
				}
			case op < 6:
				pctx, p := under()
				ks := slices.Clone(keys)
				r.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
				ks = ks[:1+r.IntN(3)]
				set, err := clients[c].AcquireAll(pctx, ks, distlock.WithWait(false))
				log = append(log, fmt.Sprintf("%d: c%d AcquireAll %v under %v: %v", step, c, ks, name(p), err))
				if err != nil {
					break
				}
				sn := &mnode{name: fmt.Sprintf("set%d", step), set: set, enders: enders(p)}
				for _, l := range set.Locks() {
					// Each fresh part is taken under the set's context,
					// not under another part.
					part := grant(c, l, p, fmt.Sprintf("c%d:%s@%d", c, l.Key(), l.Token()))
					sn.parts = append(sn.parts, part)
					sn.enders = append(sn.enders, part)
				}
				nodes = append(nodes, sn)
				handles = append(handles, &handle{node: sn})
			case op < 9:
				var open []*handle
				for _, h := range handles {
					if !h.done {
						open = append(open, h)
					}
				}
				if len(open) == 0 {
					break
				}
				h := open[r.IntN(len(open))]
				h.done = true
				if h.lock != nil {
					err := h.lock.Release(ctx)
					h.node.drop(h.lock)
					log = append(log, fmt.Sprintf("%d: release %s: %v", step, h.node.name, err))
				} else {
					err := h.node.set.Release(ctx)
					h.node.freed = true
					for i, p := range h.node.parts {
						p.drop(h.node.set.Locks()[i])
					}
					log = append(log, fmt.Sprintf("%d: release %s: %v", step, h.node.name, err))
				}
			default:
				key := keys[r.IntN(len(keys))]
				ok := srv.Revoke(key)
				for _, n := range nodes {
					if ok && n.set == nil && n.key == key && n.handles > 0 && !n.lost {
						n.lost = true
					}
				}
				log = append(log, fmt.Sprintf("%d: revoke %s: %v", step, key, ok))
			}
			synctest.Wait()
			if msg := checkNesting(nodes, srv); msg != "" {
				t.Fatalf("after step %d: %s\n%s", step, msg, joinLines(log))
			}
		}
		for _, h := range handles {
			if !h.done {
				if h.lock != nil {
					h.lock.Release(ctx)
				} else {
					h.node.set.Release(ctx)
				}
			}
		}
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Errorf("left behind: %+v\n%s", hs, joinLines(log))
		}
	})
}

// gone reports whether the grant of hold n is gone (lost or released),
// as opposed to its context having ended with an enclosing lock.
func (n *mnode) gone() bool { return n.lost || n.handles == 0 }

// errKind checks that err says what the model says of n: a lock's Err
// describes that lock (lost, released, or held with an enclosing lock
// ended), a set's names its part.
func (n *mnode) errKind(err error) string {
	isLost, isReleased := errors.Is(err, distlock.ErrLockLost), errors.Is(err, distlock.ErrReleased)
	isEnclosing := errors.Is(err, distlock.ErrEnclosingEnded)
	var ke *distlock.KeyError
	isPart := errors.As(err, &ke) && ke.Op == "hold"
	switch {
	case n.set == nil && n.handles == 0: // every handle released: each says so
		if !isReleased || isEnclosing {
			return "want ErrReleased"
		}
	case n.set == nil && n.lost:
		if !isLost {
			return "want ErrLockLost"
		}
	case n.set == nil:
		if !isEnclosing || isLost || isReleased {
			return "want an EnclosingError only"
		}
	case n.freed:
		if err != distlock.ErrReleased {
			return "want ErrReleased"
		}
	case slices.ContainsFunc(n.parts, (*mnode).gone):
		if !isPart {
			return "want a KeyError naming a part"
		}
	default:
		if !isEnclosing || isLost || isReleased {
			return "want an EnclosingError only"
		}
	}
	return ""
}

// checkNesting compares the Clients with the model.
func checkNesting(nodes []*mnode, srv *memlock.Backend) string {
	held := map[string]uint64{}
	for _, n := range nodes {
		want := n.ended()
		if got := n.err() != nil; got != want {
			return fmt.Sprintf("%s: Err %v, the model says ended=%v", n.name, n.err(), want)
		}
		if want {
			if msg := n.errKind(n.err()); msg != "" {
				return fmt.Sprintf("%s: Err %v: %s", n.name, n.err(), msg)
			}
		}
		if got := n.ctx().Err() != nil; got != want {
			return fmt.Sprintf("%s: context ended=%v, the model says %v", n.name, got, want)
		}
		if n.set == nil && n.handles > 0 && !n.lost {
			if t, ok := held[n.key]; ok {
				return fmt.Sprintf("%s: key also held with token %d", n.name, t)
			}
			held[n.key] = n.token
		}
		if !want {
			stale := 0
			if n.set != nil {
				stale = distlock.SetStaleKids(n.set)
			} else {
				stale = distlock.StaleKids(n.first)
			}
			if stale > 0 {
				return fmt.Sprintf("%s: keeps %d ended locks or sets to end", n.name, stale)
			}
		}
	}
	hs, _ := srv.List(context.Background(), "")
	if len(hs) != len(held) {
		return fmt.Sprintf("the service holds %+v, the model %v", hs, held)
	}
	for _, h := range hs {
		if held[h.Key] != h.Token {
			return fmt.Sprintf("the service holds %+v, the model %v", hs, held)
		}
	}
	return ""
}

func name(n *mnode) string {
	if n == nil {
		return "root"
	}
	return n.name
}

func joinLines(ls []string) string {
	out := ""
	for _, l := range ls {
		out += "  " + l + "\n"
	}
	return out
}

// A lock acquired under another lock's context ends with it.
func TestNestedLockEndsWithOuter(t *testing.T) {
	for _, end := range []string{"lost", "released"} {
		t.Run(end, func(t *testing.T) {
			inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
				ctx := context.Background()
				outer, _ := c.Acquire(ctx, "a")
				inner, _ := c.Acquire(outer.Context(), "b")
				if end == "lost" {
					srv.Revoke("a")
				} else {
					outer.Release(ctx)
				}
				synctest.Wait()
				if inner.Context().Err() == nil {
					t.Fatal("inner context live after the outer lock ended")
				}
				// The inner lock is still held: its Err says why its
				// context ended, not that it was lost or released.
				err := inner.Err()
				e, ok := errors.AsType[*distlock.EnclosingError](err)
				if !ok || e.Key != "a" || errors.Is(err, distlock.ErrLockLost) || errors.Is(err, distlock.ErrReleased) {
					t.Fatalf("inner Err() = %v after the outer lock was %s, want an EnclosingError naming a", err, end)
				}
				if cause := context.Cause(inner.Context()); cause != err {
					t.Errorf("inner context's cause %v, Err %v", cause, err)
				}
				if _, err := srv.Acquire(ctx, "b", driver.AcquireOptions{TTL: time.Second}); !errors.Is(err, distlock.ErrNotAcquired) {
					t.Fatalf("inner key free while its lock is not released: %v", err)
				}
				if err := inner.Release(ctx); err != nil {
					t.Errorf("inner Release: %v", err)
				}
				if _, err := srv.Acquire(ctx, "b", driver.AcquireOptions{TTL: time.Second}); err != nil {
					t.Errorf("inner key not freed: %v", err)
				}
			})
		})
	}
}

// Close racing a nested Acquire: no data race, nothing left behind.
func TestCloseRacesNestedAcquire(t *testing.T) {
	ctx := context.Background()
	for i := range 200 {
		srv := memlock.New()
		c, _ := distlock.New(srv)
		outer, err := c.Acquire(ctx, "outer")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if l, err := c.Acquire(outer.Context(), "inner"); err == nil {
				l.Release(ctx)
			}
		})
		wg.Go(func() {
			for range i % 7 {
				_ = outer.Token()
			}
			c.Close(ctx)
		})
		wg.Wait()
		c.Close(ctx)
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Fatalf("round %d: left behind: %+v", i, hs)
		}
	}
}

// Acquire through a cancelled context fails, reentrant or not, with an
// error matching ErrNotAcquired and ctx.Err().
func TestReentrantAcquireHonoursContext(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	l, _ := c.Acquire(ctx, "k")
	dctx, cancel := context.WithCancel(l.Context())
	cancel()
	if l2, err := c.Acquire(dctx, "k"); err == nil {
		t.Errorf("reentrant Acquire with a cancelled context succeeded (token %d)", l2.Token())
		l2.Release(ctx)
	}
	l.Release(ctx)
	_, err := c.Acquire(l.Context(), "k")
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire through a released lock's context: %v", err)
	}
}
