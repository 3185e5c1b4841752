package distlock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/memlock"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A lock whose renewals fail is at risk from exactly its deadline less the
// window, before its context is cancelled at the deadline; a renewal that
// succeeds afterwards re-arms it; a healthy lock is never at risk.
func TestAtRisk(t *testing.T) {
	const ttl = 3 * time.Second
	// usable: 3s*0.99 - 10ms = 2.96s; renewals every 1s; the window is
	// min(TTL/3, (2.96s-1s)/2) = 980ms.
	const usable, window = 2960 * time.Millisecond, 980 * time.Millisecond
	t.Run("healthy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, memlock.New(), distlock.WithTTL(ttl))
			l, _ := c.Acquire(ctx, "k")
			risk := l.AtRisk()
			for range 100 {
				time.Sleep(ttl / 10)
				synctest.Wait()
				if closed(risk) || closed(l.AtRisk()) {
					t.Fatal("a healthy lock is at risk")
				}
			}
			l.Release(ctx)
		})
	})
	t.Run("failing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			f := distlocktest.NewFaulty(memlock.New())
			c := newClient(t, f, distlock.WithTTL(ttl))
			start := time.Now()
			l, _ := c.Acquire(ctx, "k")
			f.Partition("k")
			risk := l.AtRisk()
			time.Sleep(usable - window - time.Millisecond)
			synctest.Wait()
			if closed(risk) {
				t.Fatalf("at risk %v after the grant, before the window", time.Since(start))
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if !closed(risk) {
				t.Fatalf("not at risk %v after the grant, %v before the deadline", time.Since(start), window)
			}
			if l.Context().Err() != nil || l.Err() != nil {
				t.Fatal("at risk only once the lock ended")
			}
			f.Heal() // the next retry is confirmed
			time.Sleep(window / 2)
			synctest.Wait()
			if l.Err() != nil {
				t.Fatalf("healed, the lock ended: %v", l.Err())
			}
			if again := l.AtRisk(); closed(again) || again == risk {
				t.Error("a confirmed renewal did not re-arm the at-risk signal")
			}
			f.Partition("k")
			risk = l.AtRisk()
			d, _ := l.Deadline()
			time.Sleep(time.Until(d) - window)
			synctest.Wait()
			if !closed(risk) || l.Context().Err() != nil {
				t.Errorf("second time: at risk %v, context %v", closed(risk), l.Context().Err())
			}
			time.Sleep(window)
			synctest.Wait()
			if l.Context().Err() == nil {
				t.Error("the deadline passed and the context is live")
			}
			l.Release(ctx)
		})
	})
}
