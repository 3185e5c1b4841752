package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/testserver"
)

// expectWake waits for a value on w, which a change must send.
func expectWake(t *testing.T, w <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-w:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no wake-up within 30s", what)
	}
}

// noWake checks that nothing woke w so far.
func noWake(t *testing.T, w <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-w:
		t.Fatalf("%s woke the watch", what)
	default:
	}
}

// Holder reads the holder of exactly one key, a lock's or an election's,
// and WatchHolder is woken by etcd at each change of it: a grant, a
// release, a new value; never by a key the name is a prefix of.
func TestHolderAndWatch(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	c := newLockClient(t, b, distlock.WithOwner("host-a:1"))

	for _, tc := range []struct {
		name, key string
		opts      []distlock.LockOption
		owner     string // what Holder reports
	}{
		{"Lock", "svc/leader", nil, "host-a:1"},
		{"Election", election.KeyPrefix + "svc/leader",
			[]distlock.LockOption{distlock.WithElection("svc/leader"), distlock.WithLockOwner("10.0.0.7:8080")}, "10.0.0.7:8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, held, err := b.Holder(ctx, tc.key); held || err != nil {
				t.Fatalf("Holder of a free key: held %v, %v", held, err)
			}
			w, err := b.WatchHolder(ctx, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			other, err := c.Acquire(ctx, tc.key+"2") // "svc/leader2": not svc/leader
			if err != nil {
				t.Fatal(err)
			}
			if h, held, err := b.Holder(ctx, tc.key); held || err != nil {
				t.Fatalf("Holder of %q while only %q is held: %+v, %v, %v", tc.key, tc.key+"2", h, held, err)
			}
			l, err := c.Acquire(ctx, tc.key, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			expectWake(t, w, "the grant")
			sent := time.Now()
			h, held, err := b.Holder(ctx, tc.key)
			if err != nil || !held || h.Key != tc.key || h.Token != l.Token() || h.Owner != tc.owner {
				t.Errorf("Holder = %+v, %v, %v; want token %d, owner %q", h, held, err, l.Token(), tc.owner)
			}
			if h.Expires.Before(sent) || h.Expires.After(sent.Add(distlock.DefaultTTL+time.Second)) {
				t.Errorf("Expires = %v, want within the TTL from %v", h.Expires, sent)
			}
			if hs, err := b.List(ctx, tc.key); err != nil || len(hs) != 2 || hs[0].Owner != tc.owner {
				t.Errorf("List = %+v, %v; want the holder listed with owner %q", hs, err, tc.owner)
			}
			if tc.name == "Election" {
				if err := l.SetOwner(ctx, "10.0.0.7:9090"); err != nil {
					t.Fatal(err)
				}
				expectWake(t, w, "the new value")
				if h, _, err := b.Holder(ctx, tc.key); err != nil || h.Owner != "10.0.0.7:9090" {
					t.Errorf("Holder after SetOwner = %+v, %v", h, err)
				}
			} else if err := l.SetOwner(ctx, "x"); err == nil {
				t.Error("SetOwner of a lock succeeded; its owner is its session's")
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			expectWake(t, w, "the release")
			if _, held, err := b.Holder(ctx, tc.key); held || err != nil {
				t.Errorf("Holder after the release: held %v, %v", held, err)
			}
			if err := other.Release(ctx); err != nil {
				t.Fatal(err)
			}
			b.Holder(ctx, tc.key) // a round trip, for the watch to deliver what it would
			noWake(t, w, "the release of "+tc.key+"2")
		})
	}
}

// A watch ends with the Backend, and Holder and WatchHolder refuse an
// invalid key.
func TestWatchHolderEnds(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	if _, err := b.WatchHolder(ctx, ""); err == nil {
		t.Error("WatchHolder of an empty key: no error")
	}
	if _, _, err := b.Holder(ctx, ""); err == nil {
		t.Error("Holder of an empty key: no error")
	}
	w, err := b.WatchHolder(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	for range w {
	}
	if _, err := b.WatchHolder(ctx, "k"); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("WatchHolder after Close: %v, want ErrClosed", err)
	}
	if _, _, err := b.Holder(ctx, "k"); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Holder after Close: %v, want ErrClosed", err)
	}
}
