package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

type valueKey struct{}

// A lock's context carries the values of the context it was acquired
// with, not its deadline nor its cancellation, and behaves as any context
// for the context package: context.Cause, AfterFunc, WithoutCancel and
// value chains derived from it, and printing. Its first handle and a
// reentered one are distinct handles on the one grant.
func TestLockContextIsAContext(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	acq, cancelAcq := context.WithTimeoutCause(context.WithValue(ctx, valueKey{}, "outer"), time.Hour, errors.New("acquire context ended"))
	defer cancelAcq()
	l, err := c.Acquire(acq, "k")
	if err != nil {
		t.Fatal(err)
	}
	lc := l.Context()
	if v := lc.Value(valueKey{}); v != "outer" {
		t.Errorf("lock context value: %v, want outer", v)
	}
	if d, ok := lc.Deadline(); ok {
		t.Errorf("lock context has the acquire context's deadline %v", d)
	}
	_ = fmt.Sprintf("%v", lc)
	fired := make(chan struct{})
	stop := context.AfterFunc(lc, func() { close(fired) })
	defer stop()
	child, cancelChild := context.WithCancel(context.WithValue(lc, valueKey{}, "inner"))
	defer cancelChild()
	detached := context.WithoutCancel(lc)

	again, err := c.Acquire(child, "k")
	if err != nil {
		t.Fatal(err)
	}
	if again == l || again.Token() != l.Token() {
		t.Fatalf("reentered handle %p (token %d) against first %p (token %d): want a distinct handle on the same grant", again, again.Token(), l, l.Token())
	}
	nested, err := c.Acquire(child, "nested")
	if err != nil {
		t.Fatal(err)
	}
	if v := nested.Context().Value(valueKey{}); v != "inner" {
		t.Errorf("nested lock context value: %v, want inner", v)
	}

	cancelAcq()
	if err := lc.Err(); err != nil {
		t.Errorf("the acquire context's end reached the lock's context: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Err() == nil || again.Err() != nil || lc.Err() != nil {
		t.Errorf("first handle released: its Err %v, the reentered handle's %v, the context's %v; want ErrReleased, nil, nil", l.Err(), again.Err(), lc.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("first handle released twice: %v, want ErrNotHeld", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-fired // the last handle's release ends the context
	for name, got := range map[string]error{"lock": context.Cause(lc), "derived": context.Cause(child)} {
		if !errors.Is(got, distlock.ErrReleased) {
			t.Errorf("cause of the %s context: %v, want ErrReleased", name, got)
		}
	}
	if detached.Err() != nil || context.Cause(detached) != nil {
		t.Errorf("WithoutCancel of the lock context ended: %v, %v", detached.Err(), context.Cause(detached))
	}
	if err := nested.Err(); !errors.Is(err, distlock.ErrEnclosingEnded) {
		t.Errorf("nested lock: %v, want ErrEnclosingEnded", err)
	}
	_ = fmt.Sprintf("%v", nested.Context())
	if err := nested.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lock's context first asked for after the lock ended (the Client makes
// it only when asked) is done already, with the reason as its cause, as it
// would have been had it been asked for before: released, lost, or ended
// with the lock it was acquired under.
func TestLockContextAskedAfterEnd(t *testing.T) {
	ctx := context.Background()
	srv := memlock.New()
	c := newClient(t, srv)
	check := func(t *testing.T, l *distlock.Lock, want error) {
		t.Helper()
		select {
		case <-l.Done():
		default:
			t.Fatal("Done of an ended lock is open")
		}
		if err := l.Context().Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("Err of an ended lock's context: %v", err)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, want) {
			t.Errorf("cause %v, want %v", cause, want)
		}
	}
	t.Run("released", func(t *testing.T) {
		l, err := c.Acquire(ctx, "released")
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		check(t, l, distlock.ErrReleased)
	})
	t.Run("lost", func(t *testing.T) {
		l, err := c.Acquire(ctx, "lost")
		if err != nil {
			t.Fatal(err)
		}
		if !srv.Revoke("lost") { // tells the Client before it returns
			t.Fatal("nothing to revoke")
		}
		check(t, l, distlock.ErrLockLost)
		l.Release(ctx)
	})
	t.Run("enclosing", func(t *testing.T) {
		outer, err := c.Acquire(ctx, "outer")
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.Acquire(outer.Context(), "inner")
		if err != nil {
			t.Fatal(err)
		}
		outer.Release(ctx)
		check(t, inner, distlock.ErrEnclosingEnded)
		inner.Release(ctx)
	})
	t.Run("set", func(t *testing.T) {
		s, err := c.AcquireAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		s.Release(ctx)
		select {
		case <-s.Done():
		default:
			t.Fatal("Done of a released set is open")
		}
		if cause := context.Cause(s.Context()); !errors.Is(cause, distlock.ErrReleased) {
			t.Errorf("released set's cause %v", cause)
		}
	})
}

// A lock's context asked for while the lock ends is done once both
// returned, whichever came first.
func TestLockContextAskedWhileEnding(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	for i := range 200 {
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan context.Context, 1)
		go func() { got <- l.Context() }()
		l.Release(ctx)
		lc := <-got
		if lc.Err() == nil {
			t.Fatalf("round %d: the context asked for during Release is live after it", i)
		}
		if lc != l.Context() {
			t.Fatalf("round %d: two contexts for one lock", i)
		}
	}
}
