package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/semaphore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t *testing.T, b driver.Backend) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestNewRefusesBadInput(t *testing.T) {
	c := newClient(t, memlock.New())
	tests := []struct {
		name   string
		c      *distlock.Client
		sem    string
		limit  int
		target error
	}{
		{"nil client", nil, "s", 1, distlock.ErrInvalidOption},
		{"empty name", c, "", 1, distlock.ErrInvalidKey},
		{"name too long", c, strings.Repeat("x", distlock.MaxKeyLen), 1, distlock.ErrInvalidKey},
		{"control character", c, "a\nb", 1, distlock.ErrInvalidKey},
		{"zero limit", c, "s", 0, distlock.ErrInvalidOption},
		{"negative limit", c, "s", -3, distlock.ErrInvalidOption},
		{"limit too large", c, "s", driver.MaxPermits + 1, distlock.ErrInvalidOption},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := semaphore.New(tc.c, tc.sem, tc.limit)
			if !errors.Is(err, tc.target) || s != nil {
				t.Fatalf("New: %v, %v; want an error matching %v", s, err, tc.target)
			}
		})
	}
}

// lockOnly is a backend that grants locks and no permits.
type lockOnly struct{ driver.Backend }

// A backend that cannot grant permits refuses them, rather than granting
// the key as a lock, which would count no limit.
func TestBackendWithoutPermits(t *testing.T) {
	c := newClient(t, lockOnly{memlock.New()})
	s, err := semaphore.New(c, "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if p, err := s.Acquire(ctx); !errors.Is(err, errors.ErrUnsupported) {
		if err == nil {
			p.Release(ctx)
		}
		t.Fatalf("Acquire: %v; want errors.ErrUnsupported", err)
	}
	if _, _, err := s.Holders(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Holders: %v; want errors.ErrUnsupported", err)
	}
}

// A permit acquired under a permit's context is another permit (the
// semaphore's count rises), never a re-entry of the first.
func TestPermitUnderPermitIsAnother(t *testing.T) {
	c := newClient(t, memlock.New())
	s, err := semaphore.New(c, "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.TryAcquire(p.Context())
	if err != nil {
		t.Fatalf("TryAcquire under a permit: %v", err)
	}
	if q.Token() == p.Token() {
		t.Fatalf("the second permit has the first's token %d", p.Token())
	}
	if r, err := s.TryAcquire(q.Context()); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			r.Release(ctx)
		}
		t.Fatalf("a third TryAcquire with a limit of 2: %v; want ErrNotAcquired", err)
	}
	for _, x := range []*semaphore.Permit{q, p} {
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Do runs its function under a permit and gives the permit back.
func TestDo(t *testing.T) {
	c := newClient(t, memlock.New())
	s, err := semaphore.New(c, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ran := false
	err = s.Do(ctx, func(ctx context.Context) error {
		ran = true
		if _, hs, err := s.Holders(ctx); err != nil || len(hs) != 1 {
			t.Errorf("Holders inside Do: %v, %v; want one permit", hs, err)
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	if limit, hs, err := s.Holders(ctx); err != nil || limit != 0 || len(hs) != 0 {
		t.Fatalf("Holders after Do: %d, %v, %v; want none", limit, hs, err)
	}
}

// TestWithWaitIsOverridden: a WithWait among WithLockOptions changes
// neither Acquire (it waits, here until its context ends, the only permit
// being held throughout) nor TryAcquire (it tries once).
func TestWithWaitIsOverridden(t *testing.T) {
	b := memlock.New()
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b)
	tests := []struct {
		name string
		wait bool
		call func(*semaphore.Semaphore, context.Context) (*semaphore.Permit, error)
		want error // besides ErrNotAcquired
	}{
		{"Acquire with WithWait(false) waits", false, (*semaphore.Semaphore).Acquire, context.DeadlineExceeded},
		{"TryAcquire with WithWait(true) tries once", true, (*semaphore.Semaphore).TryAcquire, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := semaphore.New(c, "wait", 1, semaphore.WithLockOptions(distlock.WithWait(tc.wait)))
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.TryAcquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Release(context.Background()) })
			// TryAcquire's bound is far beyond one try; Acquire's ends it.
			timeout := time.Minute
			if tc.want != nil {
				timeout = 50 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, err = tc.call(s, ctx)
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("err = %v; want ErrNotAcquired", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v; want it to match %v: Acquire tried once", err, tc.want)
			}
			if tc.want == nil && ctx.Err() != nil {
				t.Fatalf("TryAcquire waited until its context ended: %v", err)
			}
		})
	}
}
