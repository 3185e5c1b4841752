package etcdlock_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func itoa(n int) string { return strconv.Itoa(n) }

// testCtx returns a context that bounds a whole test.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// keysUnder returns the keys under name + "/", oldest first.
func keysUnder(t testing.TB, admin *clientv3.Client, name string) []*mvccpb.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, name+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get %q: %v", name, err)
	}
	kvs := resp.Kvs
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return int(a.CreateRevision - b.CreateRevision) })
	return kvs
}

// waitKeys waits until name has n keys (a holder and n-1 waiters) and
// returns them, oldest first.
func waitKeys(t testing.TB, admin *clientv3.Client, name string, n int) []*mvccpb.KeyValue {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		kvs := keysUnder(t, admin, name)
		if len(kvs) == n {
			return kvs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q has %d keys after 30s, want %d", name, len(kvs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitClosed waits for c to close, up to d.
func waitClosed(t testing.TB, c <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(d):
		t.Fatalf("%s: not done after %v", what, d)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// newLockClient returns a distlock Client over b, closed when the test ends.
func newLockClient(t testing.TB, b driver.Backend, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, opts...)
	if err != nil {
		t.Fatalf("distlock.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// section checks that at most one holder at a time is inside it, and
// records the tokens in the order they entered.
type section struct {
	inside atomic.Int32
	mu     sync.Mutex
	tokens []uint64
}

func (s *section) enter(t testing.TB, l *distlock.Lock) {
	if n := s.inside.Add(1); n != 1 {
		t.Errorf("%d holders of %q at once (token %d)", n, l.Key(), l.Token())
	}
	s.mu.Lock()
	s.tokens = append(s.tokens, l.Token())
	s.mu.Unlock()
}

func (s *section) leave(t testing.TB, l *distlock.Lock) {
	if err := l.Err(); err != nil {
		t.Errorf("lock %q (token %d) lost inside the section: %v", l.Key(), l.Token(), err)
	}
	s.inside.Add(-1)
}

func (s *section) checkIncreasing(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(s.tokens); i++ {
		if s.tokens[i] <= s.tokens[i-1] {
			t.Errorf("token %d granted after %d", s.tokens[i], s.tokens[i-1])
		}
	}
}
