package etcdlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// suiteTTL is the lease TTL the conformance suite uses where leases must
// lapse: etcd leases count in whole seconds.
const suiteTTL = 2 * time.Second

// newClient returns an etcd client of endpoints, closed when the test ends
// (after the Backends made over it, whose clean-ups were registered later).
func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("clientv3.New: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// adminClient returns a client with its connection already made, so that
// the leak checks of later subtests do not count its goroutines.
func adminClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli := newClient(t, endpoints)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatalf("admin client: %v", err)
	}
	return cli
}

// newBackend returns a Backend over cli, closed when the test ends.
func newBackend(t testing.TB, cli *clientv3.Client, opts ...etcdlock.Option) *etcdlock.Backend {
	t.Helper()
	b, err := etcdlock.New(cli, opts...)
	if err != nil {
		t.Fatalf("etcdlock.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// holderLease returns the etcd lease of the current holder of name (the
// first-created key under name/), failing the test if there is none.
func holderLease(t testing.TB, admin *clientv3.Client, name string) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, name+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatalf("get holder of %q: %v", name, err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("no holder of %q", name)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// revokeHolder revokes the session lease of key's holder, as etcd does when
// the lease expires.
func revokeHolder(t testing.TB, admin *clientv3.Client, prefix, key string) {
	t.Helper()
	id := holderLease(t, admin, etcdlock.LockName(prefix, key))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Revoke(ctx, id); err != nil {
		t.Fatalf("revoke lease %x: %v", int64(id), err)
	}
}

func TestConformance(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	distlocktest.Run(t,
		func(t *testing.T) driver.Backend { return newBackend(t, newClient(t, e.Endpoints)) },
		distlocktest.WithTTL(suiteTTL),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			revokeHolder(t, admin, etcdlock.DefaultPrefix, key)
		}),
		distlocktest.WithUnreachable(func(t *testing.T) driver.Backend {
			// Nothing listens on the port: clientv3.New succeeds (it dials
			// lazily), and every request waits for a connection.
			cli := newClient(t, []string{"127.0.0.1:" + itoa(testserver.FreePort(t))})
			return newBackend(t, cli, etcdlock.WithRequestTimeout(time.Second))
		}),
	)
}

// permitDir is where the entries of the semaphore at key are, under
// prefix: the layout the package documentation gives.
func permitDir(prefix, key string) string {
	return prefix + "%00sem/" + strings.TrimPrefix(etcdlock.LockName(prefix, key), prefix) + "/"
}

// revokePermits revokes the leases of the permits of the semaphore at
// key (its entries granted, written twice), as etcd does when they expire;
// the waiters' entries stay.
func revokePermits(t testing.TB, admin *clientv3.Client, prefix, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, permitDir(prefix, key), clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get the entries of %q: %v", key, err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if kv.Version < 2 {
			continue // a waiter
		}
		n++
		if _, err := admin.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
			t.Fatalf("revoke lease %x: %v", kv.Lease, err)
		}
	}
	if n == 0 {
		t.Fatalf("no permit of %q to revoke", key)
	}
}

func TestSemaphoreConformance(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	distlocktest.RunSemaphore(t,
		func(t *testing.T) driver.Backend { return newBackend(t, newClient(t, e.Endpoints)) },
		distlocktest.WithTTL(suiteTTL),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			revokePermits(t, admin, etcdlock.DefaultPrefix, key)
		}),
	)
}

// revokeAll revokes the session leases of every key under key's lock name
// (the readers that hold it, and any waiter), as etcd does when they
// expire.
func revokeAll(t testing.TB, admin *clientv3.Client, prefix, key string) {
	t.Helper()
	kvs := keysUnder(t, admin, etcdlock.LockName(prefix, key))
	if len(kvs) == 0 {
		t.Fatalf("no key of %q to revoke", key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	revoked := map[int64]bool{}
	for _, kv := range kvs {
		if kv.Lease == 0 || revoked[kv.Lease] {
			continue
		}
		revoked[kv.Lease] = true
		if _, err := admin.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
			t.Fatalf("revoke lease %x: %v", kv.Lease, err)
		}
	}
}

func TestSharedConformance(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	distlocktest.RunShared(t,
		func(t *testing.T) driver.Backend { return newBackend(t, newClient(t, e.Endpoints)) },
		distlocktest.WithTTL(suiteTTL),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			revokeAll(t, admin, etcdlock.DefaultPrefix, key)
		}),
	)
}
