package redlock

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// holdReplies is a go-redis hook that, once armed, keeps the reply of a
// waiter's acquire request (one that names a queue member) from its
// caller until the request's context ends: the request has run on the
// node, but the try has not returned.
type holdReplies struct {
	mu    sync.Mutex
	armed bool
	held  chan struct{}
	// free, when closed, lets the held replies go on, as errors.
	free chan struct{}
}

func (h *holdReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *holdReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		// EVALSHA sha 8 KEYS[1..8] ARGV[1..7]: ARGV[5] is the member.
		if len(a) != 18 || (a[1] != acquireScript.Hash() && a[1] != acquireLua) || a[15] == "" {
			return err
		}
		h.mu.Lock()
		armed := h.armed
		h.mu.Unlock()
		if !armed {
			return err
		}
		h.held <- struct{}{}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.free:
			return errors.New("reply held back")
		}
	}
}

// A waiter that a release woke and that gives up before its next try
// reaches the nodes passes its turn on: the release woke nobody else, and
// the next waiter would otherwise sleep until the released holder's TTL
// would have run out.
func TestWokenWaiterThatGivesUpPassesItsTurnOn(t *testing.T) {
	testWokenWaiterGivesUp(t, false)
}

// So does a woken waiter whose Backend is closed before its next try.
func TestWokenWaiterOfClosedBackendPassesItsTurnOn(t *testing.T) {
	testWokenWaiterGivesUp(t, true)
}

func testWokenWaiterGivesUp(t *testing.T, closeBackend bool) {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	var addrs []string
	for range 3 {
		addrs = append(addrs, testserver.StartRedis(t).Addr)
	}
	const hold = 2 * time.Minute
	newB := func(h *holdReplies, opts ...Option) *Backend {
		var nodes []Node
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
			if h != nil {
				c.AddHook(h)
			}
			t.Cleanup(func() { _ = c.Close() })
			nodes = append(nodes, c)
		}
		b, err := New(nodes, opts...)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return b
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	const key = "woken-gives-up"
	holder := newB(nil)
	held, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: hold, Owner: "holder"})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	k := holder.keysFor(key)
	rdbs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: a})
		defer rdbs[i].Close()
	}
	queued := func(n int64) func() bool {
		return func() bool {
			for _, r := range rdbs {
				if c, _ := r.ZCard(ctx, k.queue).Result(); c != n {
					return false
				}
			}
			return true
		}
	}

	// The first waiter queues on every node, but its try has not returned
	// when the release wakes it; then it gives up.
	h := &holdReplies{held: make(chan struct{}, len(addrs)), free: make(chan struct{})}
	first := newB(h, WithRequestTimeout(30*time.Second))
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	firstDone := make(chan error, 1)
	go func() {
		_, err := first.Acquire(fctx, key, driver.AcquireOptions{TTL: hold, Wait: true, Owner: "first"})
		firstDone <- err
	}()
	for range addrs {
		select {
		case <-h.held:
		case <-ctx.Done():
			t.Fatal("the first waiter's try never reached the nodes")
		}
	}
	second := newB(nil)
	secondDone := make(chan error, 1)
	go func() {
		l, err := second.Acquire(ctx, key, driver.AcquireOptions{TTL: hold, Wait: true, Owner: "second"})
		if err == nil {
			err = l.Release(ctx)
		}
		secondDone <- err
	}()
	eventually("both waiters queued on every node", queued(2))
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	eventually("every node's wake-up reached the first waiter", func() bool {
		s := first.readySubscriber()
		if s == nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, w := range s.waiters {
			if bits.OnesCount64(w.wokeBy) == len(addrs) {
				return true
			}
		}
		return false
	})
	if closeBackend {
		if err := first.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		close(h.free)
		if err := <-firstDone; err == nil {
			t.Fatal("first waiter: granted by a closed Backend")
		}
	} else {
		cancel()
		if err := <-firstDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("first waiter: %v, want context.Canceled", err)
		}
	}
	// The holder's TTL is far away: only a wake-up gets the second waiter
	// the lock before it.
	wctx, wstop := context.WithTimeout(ctx, 30*time.Second)
	defer wstop()
	select {
	case err := <-secondDone:
		if err != nil {
			t.Fatalf("second waiter: %v", err)
		}
	case <-wctx.Done():
		t.Fatal("the second waiter was not woken after the woken first waiter gave up")
	}
}
