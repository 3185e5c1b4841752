package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
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

// firstCycleOver waits until no node holds a lock key: the first cycle's
// release, decided by a majority, may still be on its way to the last
// node, and a grant asked meanwhile is refused there (held by the first
// cycle's grant) and granted by the two others, so that its release later
// finds that node without it and needs the two others' answers.
func firstCycleOver(t *testing.T, srvs []*testserver.Redis) {
	t.Helper()
	eventually(t, 10*time.Second, "the first cycle over on every node", func() bool {
		for _, s := range srvs {
			if len(lockKeysOn(t, s)) > 0 {
				return false
			}
		}
		return true
	})
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
	firstCycleOver(t, srvs)

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
	firstCycleOver(t, srvs)

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

// A try that the nodes answering first refuse (the key held on two of
// three) waits for the last node's vote all the same, and cleans up the
// grant that node gave it before Acquire returns. Returning at the
// majority's refusal left the late grant on that node until a clean-up
// in the background: the next tries, this caller's own among them, found
// the node held or granted it with counters apart, so that the votes of a
// later grant disagreed and its token was raised, and Holder read a
// majority of that grant's nodes before the raise at a token no lease has.
func TestRefusedTryWaitsForEveryNode(t *testing.T) {
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
	b := newBackendOf(t, nodes, redlock.WithRequestTimeout(10*time.Second))
	const key = "straggler/refused"
	gone := func() bool { return len(lockKeysOn(t, srvs[2])) == 0 }
	cycle(t, ctx, b, key) // the scripts loaded on every node
	firstCycleOver(t, srvs)

	// The key held on nodes 1 and 2 only, free on node 3.
	other := newBackendOf(t, []redlock.Node{patientClient(t, srvs[0].Addr), patientClient(t, srvs[1].Addr)}, redlock.WithRequestTimeout(10*time.Second))
	held, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire on nodes 1 and 2: %v", err)
	}
	defer held.Release(context.WithoutCancel(ctx))

	close(h.armed)
	done := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if l != nil {
			l.Release(context.WithoutCancel(ctx))
		}
		done <- err
	}()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the try never went to node 3")
	}
	// Node 3's vote is held: Acquire must not return without it. (Not
	// returning is what the fix guarantees; a second is what the early
	// return needed many times over.)
	select {
	case err := <-done:
		close(h.goOn)
		t.Fatalf("Acquire returned (%v) while node 3's vote was held back, want it to wait for that vote", err)
	case <-time.After(time.Second):
	}
	close(h.goOn)
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("Acquire: %v, want ErrNotAcquired (held on two of three nodes)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire never returned once node 3's vote went on")
	}
	if err := <-h.errs; err != nil {
		t.Fatalf("node 3's vote: %v, want it answered", err)
	}
	// Node 3 granted the try (it was free there): the grant was cleaned
	// up before Acquire returned.
	if !gone() {
		t.Fatalf("node 3 holds %v after the refused Acquire returned, want the try's grant cleaned up", lockKeysOn(t, srvs[2]))
	}
}
