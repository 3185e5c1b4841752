package distlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// listOnly is a backend that can list holders but neither read one key
// nor watch it, and whose leases cannot change their owner.
type listOnly struct{ b *memlock.Backend }

func (l listOnly) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	lease, err := l.b.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return plainLease{lease}, nil
}

func (l listOnly) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	return l.b.List(ctx, prefix)
}

// plainLease hides the optional interfaces of a lease.
type plainLease struct{ driver.Lease }

// acquireOnly can do nothing but acquire.
type acquireOnly struct{ b *memlock.Backend }

func (a acquireOnly) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	return a.b.Acquire(ctx, key, o)
}

// silentWatch announces every change but expiries, as a service whose
// leases lapse silently.
type silentWatch struct{ *memlock.Backend }

func (s silentWatch) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	in, err := s.Backend.WatchHolder(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	last, held, _ := s.Backend.Holder(ctx, key)
	go func() {
		defer close(out)
		for range in {
			h, now, _ := s.Backend.Holder(ctx, key)
			expired := held && !now && !time.Now().Before(last.Expires)
			last, held = h, now
			if expired {
				continue
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

// The owner stored with a grant is the lock's (WithLockOwner) over the
// Client's (WithOwner); a bad one is refused.
func TestLockOwner(t *testing.T) {
	ctx := context.Background()
	srv := memlock.New()
	c := newClient(t, srv, distlock.WithOwner("the client"))
	for _, tc := range []struct {
		key  string
		opts []distlock.LockOption
		want string
	}{
		{"owner/client", nil, "the client"},
		{"owner/lock", []distlock.LockOption{distlock.WithLockOwner("10.0.0.7:8080")}, "10.0.0.7:8080"},
		{"owner/empty", []distlock.LockOption{distlock.WithLockOwner("")}, ""},
		{"owner/nil", []distlock.LockOption{nil}, "the client"},
	} {
		l, err := c.Acquire(ctx, tc.key, tc.opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		h, held, err := c.Holder(ctx, tc.key)
		if err != nil || !held || h.Owner != tc.want || h.Token != l.Token() || h.Key != tc.key {
			t.Errorf("%s: Holder() = %+v, %v, %v; want owner %q, token %d", tc.key, h, held, err, tc.want, l.Token())
		}
		l.Release(ctx)
	}
	for name, bad := range map[string]string{
		"not UTF-8": "\xff",
		"too long":  strings.Repeat("x", distlock.MaxOwnerLen+1),
	} {
		if _, err := c.Acquire(ctx, "owner/bad", distlock.WithLockOwner(bad)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: Acquire: %v, want ErrInvalidOption", name, err)
		}
		if _, err := distlock.New(srv, distlock.WithOwner(bad)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: New: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := c.Acquire(ctx, "owner/longest", distlock.WithLockOwner(strings.Repeat("x", distlock.MaxOwnerLen))); err != nil {
		t.Errorf("an owner of MaxOwnerLen bytes: %v", err)
	}
}

// Holder reads exactly one key, never a key it is a prefix of, whether
// the backend reads one key or only lists a prefix; a backend that can do
// neither says so.
func TestHolderExactKey(t *testing.T) {
	ctx := context.Background()
	srv := memlock.New()
	for _, tc := range []struct {
		name string
		b    driver.Backend
	}{
		{"reader", srv},
		{"lister", listOnly{srv}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.b)
			other, err := c.Acquire(ctx, "svc/leader2")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release(ctx)
			if h, held, err := c.Holder(ctx, "svc/leader"); held || err != nil {
				t.Errorf(`Holder("svc/leader") = %+v, %v, %v while only "svc/leader2" is held`, h, held, err)
			}
			l, err := c.Acquire(ctx, "svc/leader")
			if err != nil {
				t.Fatal(err)
			}
			if h, held, err := c.Holder(ctx, "svc/leader"); !held || err != nil || h.Token != l.Token() || h.Key != "svc/leader" {
				t.Errorf(`Holder("svc/leader") = %+v, %v, %v; want token %d`, h, held, err, l.Token())
			}
			l.Release(ctx)
		})
	}
	c := newClient(t, acquireOnly{srv})
	if _, _, err := c.Holder(ctx, "svc/leader"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Holder on a backend that cannot read holders: %v, want errors.ErrUnsupported", err)
	}
	var ke *distlock.KeyError
	if _, _, err := c.Holder(ctx, ""); !errors.Is(err, distlock.ErrInvalidKey) || !errors.As(err, &ke) {
		t.Errorf(`Holder(""): %v, want a KeyError matching ErrInvalidKey`, err)
	}
}

// Watch sends the holder as it is, then each change: a grant, a new owner,
// a release, an expiry; on a backend that watches, that lists only (by
// polling), and whose watch misses silent expiries (by reading at the
// holder's Expires).
func TestWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    func(*memlock.Backend) driver.Backend
	}{
		{"watcher", func(b *memlock.Backend) driver.Backend { return b }},
		{"lister", func(b *memlock.Backend) driver.Backend { return listOnly{b} }},
		{"silent watch", func(b *memlock.Backend) driver.Backend { return silentWatch{b} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				srv := memlock.New()
				c := newClient(t, tc.b(srv), distlock.WithOwner("o"), distlock.WithTTL(10*time.Second))
				ch, err := c.Watch(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				next := func(want distlock.Holder) {
					t.Helper()
					select {
					case h := <-ch:
						if h.Key != want.Key || h.Token != want.Token || h.Owner != want.Owner {
							t.Fatalf("Watch sent %+v, want %+v", h, want)
						}
					case <-time.After(time.Minute):
						t.Fatalf("Watch sent nothing; want %+v", want)
					}
				}
				next(distlock.Holder{Key: "k"})
				l, err := c.Acquire(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				next(distlock.Holder{Key: "k", Token: l.Token(), Owner: "o"})
				if err := l.SetOwner(ctx, "o2"); err == nil {
					next(distlock.Holder{Key: "k", Token: l.Token(), Owner: "o2"})
				} else if !errors.Is(err, errors.ErrUnsupported) {
					t.Fatalf("SetOwner: %v", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				next(distlock.Holder{Key: "k"})
				// A grant that its holder abandons lapses at the service,
				// which may not say so.
				l2, err := srv.Acquire(ctx, "k", driver.AcquireOptions{TTL: 10 * time.Second, Owner: "gone"})
				if err != nil {
					t.Fatal(err)
				}
				next(distlock.Holder{Key: "k", Token: l2.Token(), Owner: "gone"})
				next(distlock.Holder{Key: "k"})
				cancel()
				if h, ok := <-ch; ok {
					t.Errorf("Watch sent %+v after its context ended", h)
				}
			})
		})
	}
}

// Watch's channel is closed when the Client is closed; a closed Client, a
// bad key, and a backend that cannot read holders are errors or a
// closed channel, with nothing left running.
func TestWatchEnds(t *testing.T) {
	ctx := context.Background()
	srv := memlock.New()
	c, err := distlock.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	<-ch // free
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if h, ok := <-ch; ok {
		t.Errorf("Watch sent %+v after Close", h)
	}
	if _, err := c.Watch(ctx, "k"); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Watch after Close: %v, want ErrClosed", err)
	}
	c2 := newClient(t, srv)
	if _, err := c2.Watch(ctx, ""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf(`Watch(""): %v, want ErrInvalidKey`, err)
	}
	c3 := newClient(t, acquireOnly{srv})
	if _, err := c3.Watch(ctx, "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Watch on a backend that cannot read holders: %v, want errors.ErrUnsupported", err)
	}
}

// SetOwner changes the stored owner of a held lock only: after Release it
// is ErrNotHeld, after a loss ErrLockLost, a backend that cannot is
// errors.ErrUnsupported, and a bad owner ErrInvalidOption.
func TestSetOwner(t *testing.T) {
	ctx := context.Background()
	srv := memlock.New()
	c := newClient(t, srv)
	l, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetOwner(ctx, "\xff"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("SetOwner of a bad owner: %v, want ErrInvalidOption", err)
	}
	if err := l.SetOwner(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := c.Holder(ctx, "k"); h.Owner != "new" {
		t.Errorf("owner after SetOwner = %q", h.Owner)
	}
	l.Release(ctx)
	if err := l.SetOwner(ctx, "x"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("SetOwner after Release: %v, want ErrNotHeld", err)
	}

	l, err = c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	srv.Revoke("k")
	<-l.Done()
	if err := l.SetOwner(ctx, "x"); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("SetOwner after a loss: %v, want ErrLockLost", err)
	}
	l.Release(ctx)

	plain := newClient(t, listOnly{srv})
	l, err = plain.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var ke *distlock.KeyError
	if err := l.SetOwner(ctx, "x"); !errors.Is(err, errors.ErrUnsupported) || !errors.As(err, &ke) {
		t.Errorf("SetOwner on a backend that cannot: %v, want a KeyError matching errors.ErrUnsupported", err)
	}
}

func TestList(t *testing.T) {
	ctx := context.Background()
	b := memlock.New()
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, k := range []string{"list/b", "list/a", "lists/c"} {
		l, err := c.Acquire(ctx, k, distlock.WithLockOwner("o-"+k))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	hs, err := c.List(ctx, "list/")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var keys []string
	for _, h := range hs {
		keys = append(keys, h.Key+"="+h.Owner)
	}
	if got, want := strings.Join(keys, ","), "list/a=o-list/a,list/b=o-list/b"; got != want {
		t.Fatalf("List(list/) = %s; want %s", got, want)
	}
	if hs, err := c.List(ctx, ""); err != nil || len(hs) != 3 {
		t.Fatalf("List(\"\") = %d holders, %v; want 3", len(hs), err)
	}
	var ke *distlock.KeyError
	if _, err := c.List(ctx, "bad\x00prefix"); !errors.Is(err, distlock.ErrInvalidKey) || !errors.As(err, &ke) {
		t.Fatalf("List of a bad prefix: %v; want a *KeyError matching ErrInvalidKey", err)
	}
	c2, err := distlock.New(acquireOnly{b})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	if _, err := c2.List(ctx, "list/"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("List over a backend without Lister: %v; want errors.ErrUnsupported", err)
	}
}
