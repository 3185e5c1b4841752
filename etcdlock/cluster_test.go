package etcdlock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

// The leader of a 3-node cluster is killed while a lock is held and others
// wait: nobody is granted the lock twice, tokens keep increasing, and every
// waiter is eventually served.
func TestLeaderKilledWhileHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	e := testserver.StartEtcdCluster(t, 3)
	admin := adminClient(t, e.Endpoints)
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
		s       section
		grants  atomic.Int64
		killed  = make(chan struct{})
		killOne sync.Once
		queued  int
	)
	var wg sync.WaitGroup
	for range clients {
		b := newBackend(t, newClient(t, e.Endpoints))
		c := newLockClient(t, b, distlock.WithTTL(5*time.Second))
		for range workers {
			wg.Go(func() {
				after := 0
				for after < roundsAfter {
					wasKilled := isClosed(killed)
					l, err := c.Acquire(ctx, key)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					s.enter(t, l)
					if grants.Add(1) == killAt {
						killOne.Do(func() {
							queued = len(keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key))) - 1
							leader := e.Leader(t)
							leader.Kill()
							t.Logf("killed leader %s holding token %d with %d waiters queued in etcd", leader.Name, l.Token(), queued)
							close(killed)
						})
					}
					time.Sleep(sectionLength) // widen the section
					s.leave(t, l)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
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
		t.Errorf("no waiter was queued in etcd when the leader was killed")
	}
	s.checkIncreasing(t)
	t.Logf("%d grants, %d after the kill by each of %d workers", len(s.tokens), roundsAfter, clients*workers)
}
