package partition_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/partition"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	ttl       = 2 * time.Second
	reconcile = 500 * time.Millisecond
	minHold   = time.Second
	// The package's bounds, in the bubble's fake time: a reconcile
	// interval with its jitter, and what settle's polling adds.
	jittered = reconcile * 5 / 4
	slack    = 20 * time.Millisecond
)

// mortal is a member's way to the service, which a test can cut for good:
// a member process that died, whose locks lapse by their TTL.
type mortal struct {
	driver.Backend
	mu   sync.Mutex
	dead bool
}

var errDead = fmt.Errorf("%w: the member died", distlock.ErrUnavailable)

func (m *mortal) isDead() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead
}

func (m *mortal) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = true
}

func (m *mortal) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	if m.isDead() {
		return nil, errDead
	}
	l, err := m.Backend.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return &mortalLease{Lease: l, m: m}, nil
}

func (m *mortal) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if m.isDead() {
		return nil, errDead
	}
	return m.Backend.(driver.Lister).List(ctx, prefix)
}

type mortalLease struct {
	driver.Lease
	m *mortal
}

func (l *mortalLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if l.m.isDead() {
		return driver.Validity{}, errDead
	}
	return l.Lease.Refresh(ctx, ttl)
}

func (l *mortalLease) Release(ctx context.Context) error {
	if l.m.isDead() {
		// A dead process releases nothing; its Client gives up at once
		// rather than retrying until the lease lapses.
		return fmt.Errorf("%w: the member died", distlock.ErrLockLost)
	}
	return l.Lease.Release(ctx)
}

// group is the members of one group over one service, and what they did.
type group struct {
	t     *testing.T
	srv   *memlock.Backend
	units []string
	reg   *fence.Register

	mu      sync.Mutex
	owning  map[string]string // unit → member running fn for it
	calls   int
	members map[string]*member
}

type member struct {
	p      *partition.Partition
	way    *mortal
	cancel context.CancelFunc
	done   chan error
}

func newGroup(t *testing.T, units int) *group {
	return &group{t: t, srv: memlock.New(), units: partition.Count(units), reg: fence.NewRegister(),
		owning: map[string]string{}, members: map[string]*member{}}
}

// join starts a member.
func (g *group) join(id string) *member {
	g.t.Helper()
	way := &mortal{Backend: g.srv}
	c, err := distlock.New(way, distlock.WithTTL(ttl))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { c.Close(context.Background()) })
	p, err := partition.New(c, "billing", g.units, partition.WithMember(id),
		partition.WithReconcile(reconcile), partition.WithMinHold(minHold))
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{p: p, way: way, cancel: cancel, done: make(chan error, 1)}
	g.mu.Lock()
	g.members[id] = m
	g.mu.Unlock()
	go func() {
		m.done <- p.Run(ctx, func(ctx context.Context, u partition.Unit) error { return g.own(ctx, id, u) })
	}()
	return m
}

// own is every member's fn: it checks that nobody else owns the unit,
// writes through the unit's fence, and holds the unit until its context
// ends.
func (g *group) own(ctx context.Context, id string, u partition.Unit) error {
	g.mu.Lock()
	if other, ok := g.owning[u.Name]; ok {
		g.t.Errorf("unit %s: %s granted while %s owns it", u.Name, id, other)
	}
	g.owning[u.Name] = id
	g.calls++
	g.mu.Unlock()
	if err := g.reg.Admit(u.Name, u.Token); err != nil {
		g.t.Errorf("unit %s: %s's token refused: %v", u.Name, id, err)
	}
	<-ctx.Done()
	g.mu.Lock()
	delete(g.owning, u.Name)
	g.mu.Unlock()
	return nil
}

// settle waits until the group is settled with want members, and returns
// the assignment and how long it took.
func (g *group) settle(want int, within time.Duration) (partition.Assignment, time.Duration) {
	g.t.Helper()
	var p *partition.Partition
	g.mu.Lock()
	for _, m := range g.members {
		if !m.way.isDead() {
			p = m.p
			break
		}
	}
	g.mu.Unlock()
	start := time.Now()
	for {
		a, err := p.Assignment(context.Background())
		if err != nil {
			g.t.Fatal(err)
		}
		if len(a.Members) == want && a.Settled() {
			return a, time.Since(start)
		}
		if time.Since(start) > within {
			g.t.Fatalf("not settled with %d members within %v: %+v", want, within, a)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func owners(a partition.Assignment) map[string]string {
	o := map[string]string{}
	for _, u := range a.Units {
		o[u.Name] = u.Owner
	}
	return o
}

func checkBalanced(t *testing.T, a partition.Assignment) {
	t.Helper()
	lo, hi := len(a.Units), 0
	for _, m := range a.Members {
		lo, hi = min(lo, m.Owned), max(hi, m.Owned)
	}
	if hi-lo > 1 {
		t.Fatalf("unbalanced: shares %d to %d: %+v", lo, hi, a.Members)
	}
}

// TestGroup follows a group through joins, a leave and a death, checking
// at each step that it settles balanced within the package's bounds, and
// throughout that no unit has two owners and every write is admitted by
// the unit's fence.
func TestGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, 64)
		for i := range 3 {
			g.join(fmt.Sprintf("worker-%d", i))
		}
		a, _ := g.settle(3, ttl+2*reconcile)
		checkBalanced(t, a)

		// A join: units move to the new member after the minimum hold.
		g.join("worker-3")
		b, took := g.settle(4, jittered+minHold+slack)
		checkBalanced(t, b)
		moved := 0
		for u, m := range owners(a) {
			if owners(b)[u] != m {
				moved++
			}
		}
		t.Logf("join: %d of 64 units moved (ideal 16), settled in %v", moved, took)
		if moved > 32 {
			t.Fatalf("a join moved %d of 64 units", moved)
		}

		// A planned leave: no TTL is waited out. The leaver's units move
		// within a reconcile interval; the shares of the others change too,
		// and units that move between them wait for the minimum hold.
		g.members["worker-1"].cancel()
		if err := <-g.members["worker-1"].done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after its context ended: %v", err)
		}
		g.mu.Lock()
		delete(g.members, "worker-1")
		g.mu.Unlock()
		c, took := g.settle(3, jittered+minHold+slack)
		checkBalanced(t, c)
		t.Logf("leave: settled in %v", took)

		// A death: the member's locks lapse within the TTL, and its units
		// are owned within the TTL plus a reconcile interval (the minimum
		// hold of units moving between the others has passed by then).
		g.members["worker-2"].way.kill()
		d, took := g.settle(2, ttl+jittered+slack)
		checkBalanced(t, d)
		t.Logf("death: settled in %v", took)

		for id, m := range g.members {
			m.cancel()
			if err := <-m.done; !errors.Is(err, context.Canceled) && !m.way.isDead() {
				t.Errorf("%s's Run: %v", id, err)
			}
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.owning) != 0 {
			t.Fatalf("units still owned after every Run returned: %v", g.owning)
		}
	})
}
