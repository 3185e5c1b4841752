package zklock_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/testserver"
)

// The leader of a 3-server ensemble is killed while a lock is held and
// others wait: nobody is granted the lock while another holds it, tokens
// keep increasing, and every waiter is served again afterwards.
func TestLeaderKilledWhileHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server ensemble")
	}
	z := testserver.StartZooKeeperEnsemble(t, 3)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	const (
		key           = "failover"
		clients       = 4
		workers       = 3
		killAt        = 20 // the grant during which the leader is killed
		roundsAfter   = 4  // grants each worker must get after the kill
		sectionLength = 2 * time.Millisecond
	)
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		tokens  []uint64
		lost    atomic.Int32
		grants  atomic.Int64
		killed  = make(chan struct{})
		killOne sync.Once
		queued  int
	)
	var wg sync.WaitGroup
	for range clients {
		c := newClient(t, newBackendTimeout(t, z.Servers, 4*time.Second), distlock.WithTTL(4*time.Second))
		for range workers {
			wg.Go(func() {
				for after := 0; after < roundsAfter; {
					wasKilled := isClosed(killed)
					l, err := c.Acquire(ctx, key)
					if errors.Is(err, distlock.ErrUnavailable) && ctx.Err() == nil {
						continue // the ensemble has no quorum yet
					}
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders at once (token %d)", n, l.Token())
					}
					mu.Lock()
					tokens = append(tokens, l.Token())
					mu.Unlock()
					if grants.Add(1) == killAt {
						killOne.Do(func() {
							queued = len(nodesOf(t, admin, key)) - 1
							leader := z.Leader(t)
							leader.Kill()
							t.Logf("killed leader %d holding token %#x with %d waiters queued", leader.ID, l.Token(), queued)
							close(killed)
						})
					}
					select {
					case <-time.After(sectionLength):
					case <-l.Done(): // lost: leave at once
					}
					inside.Add(-1)
					if l.Err() != nil {
						lost.Add(1)
					}
					if err := l.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
						t.Logf("Release: %v", err)
					}
					if wasKilled {
						after++
					}
				}
			})
		}
	}
	wg.Wait()
	if !isClosed(killed) {
		t.Fatal("the leader was never killed")
	}
	if queued == 0 {
		t.Errorf("no waiter was queued when the leader was killed")
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("token %#x granted after %#x", tokens[i], tokens[i-1])
		}
	}
	t.Logf("%d grants (%d lost while held), %d after the kill by each of %d workers; tokens %#x to %#x", len(tokens), lost.Load(), roundsAfter, clients*workers, tokens[0], tokens[len(tokens)-1])
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
