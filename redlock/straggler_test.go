package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redlock"
)

// holdBack is a go-redis hook that, while armed, holds each script call
// of its client before it is sent until the test lets it go, as a request
// waiting for a connection is held, and reports the call's outcome.
type holdBack struct {
	armed chan struct{} // closed to arm
	held  chan struct{} // a held call arrived
	goOn  chan struct{} // closed to let the held calls go
	errs  chan error    // each held call's outcome
}

func newHoldBack() *holdBack {
	return &holdBack{armed: make(chan struct{}), held: make(chan struct{}, 8), goOn: make(chan struct{}), errs: make(chan error, 8)}
}

func (h *holdBack) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdBack) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		select {
		case <-h.armed:
		default:
			return next(ctx, cmd)
		}
		if name := cmd.Name(); name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		h.held <- struct{}{}
		select {
		case <-h.goOn:
		case <-ctx.Done():
			// Held up to its timeout: the call decided without it did
			// not return (the test fails on that).
		}
		err := next(ctx, cmd)
		h.errs <- err
		return err
	}
}

func (h *holdBack) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// patientClient is newClient with no timeout of its own but the dial's
// (10s): the per-node timeout bounds its requests.
func patientClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: 10 * time.Second, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// A release decided by a majority returns without the last node; that
// node's request still goes out when the caller cancels its context right
// after the call returned, and releases the grant there (issue 29).
func TestStragglerOutlivesCallerContext(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	h := newHoldBack()
	var nodes []redlock.Node
	for i, s := range srvs {
		c := patientClient(t, s.Addr)
		if i == 2 {
			c.AddHook(h)
		}
		nodes = append(nodes, c)
	}
	// Timeouts far above a loaded machine's delays: the release must be
	// decided by nodes 1 and 2 while node 3's request is held.
	b := newBackendOf(t, nodes, redlock.WithRequestTimeout(10*time.Second))
	const key = "straggler/caller-ctx"
	gone := func() bool { return len(lockKeysOn(t, srvs[2])) == 0 }
	cycle(t, ctx, b, key) // the scripts loaded on every node
	eventually(t, 10*time.Second, "the first cycle over on node 3", gone)

	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	close(h.armed)
	rctx, cancel := context.WithCancel(ctx)
	if err := l.Release(rctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the release never went to node 3")
	}
	cancel()
	close(h.goOn)
	select {
	case err := <-h.errs:
		if err != nil {
			t.Fatalf("node 3's release, sent after the caller's context ended: %v, want it sent and answered", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("node 3's release never returned")
	}
	if !gone() {
		t.Fatalf("node 3 holds %v after its release was answered", lockKeysOn(t, srvs[2]))
	}
}

// Close returns within its bound (2s) while a straggler's request waits
// on a node that does not answer, well before that request's timeout.
func TestCloseWithStalledStraggler(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	p := faultproxy.Start(t, srvs[2].Addr)
	// The per-node timeout (a minute) alone bounds the stalled request.
	const timeout = time.Minute
	b := newBackendOf(t, []redlock.Node{patientClient(t, srvs[0].Addr), patientClient(t, srvs[1].Addr), patientClient(t, p.Addr())}, redlock.WithRequestTimeout(timeout))
	const key = "straggler/close"
	cycle(t, ctx, b, key)
	eventually(t, 10*time.Second, "the first cycle over on node 3", func() bool { return len(lockKeysOn(t, srvs[2])) == 0 })

	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	p.Blackhole()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release decided by the two other nodes: %v", err)
	}
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The bound is 2s; the stalled request would hold a Close that
	// waited for it for its minute.
	if d := time.Since(start); d > timeout/3 {
		t.Fatalf("Close took %v with a straggler stalled, want about 2s (its request's timeout is %v)", d, timeout)
	}
	// The stalled request ends with its client (the test's clean-up).
}
