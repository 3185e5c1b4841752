package etcdlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

func TestLockName(t *testing.T) {
	for key, want := range map[string]string{
		"a":          "distlock/a",
		"a/b":        "distlock/a%2Fb",
		"a%2Fb":      "distlock/a%252Fb",
		"%":          "distlock/%25",
		"/":          "distlock/%2F",
		"jobs.daily": "distlock/jobs.daily",
		"ключ":       "distlock/ключ",
	} {
		if got := etcdlock.LockName(etcdlock.DefaultPrefix, key); got != want {
			t.Errorf("LockName(%q) = %q, want %q", key, got, want)
		}
	}
	// Mutex ranges over NAME + "/": no lock's range may hold another's keys,
	// and no two keys may share a name.
	keys := []string{"a", "a/b", "a/", "a%2Fb", "a%2fb", "a%", "%", "%25", "/", "//", "a//b", "b", "a/b/c", "%00", "ab"}
	for _, k1 := range keys {
		for _, k2 := range keys {
			if k1 == k2 {
				continue
			}
			n1, n2 := etcdlock.LockName("p/", k1), etcdlock.LockName("p/", k2)
			if n1 == n2 || strings.HasPrefix(n2+"/x", n1+"/") {
				t.Errorf("keys %q and %q: names %q and %q overlap", k1, k2, n1, n2)
			}
		}
	}
}

func TestList(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints), etcdlock.WithPrefix("list-test/"))
	other := newBackend(t, newClient(t, e.Endpoints), etcdlock.WithPrefix("list-test/"))
	held := map[string]driver.Lease{}
	for _, k := range []string{"jobs/a", "jobs/b", "other"} {
		l, err := b.Acquire(ctx, k, driver.AcquireOptions{TTL: 5 * time.Second, Owner: "host-a:1"})
		if err != nil {
			t.Fatal(err)
		}
		held[k] = l
	}
	// A waiter is not a holder.
	go other.Acquire(ctx, "jobs/a", driver.AcquireOptions{TTL: 5 * time.Second, Wait: true, Owner: "host-b:2"})
	if name := b.KeyPath("jobs/a"); name != "list-test/jobs%2Fa" {
		t.Errorf("KeyPath(jobs/a) = %q, want list-test/jobs%%2Fa", name)
	}
	waitKeys(t, adminClient(t, e.Endpoints), b.KeyPath("jobs/a"), 2)

	hs, err := b.List(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Key != "jobs/a" || hs[1].Key != "jobs/b" {
		t.Fatalf("List(jobs/) = %+v, want jobs/a and jobs/b", hs)
	}
	for _, h := range hs {
		if h.Token != held[h.Key].Token() {
			t.Errorf("%s: token %d, want %d", h.Key, h.Token, held[h.Key].Token())
		}
		if h.Owner != "host-a:1" {
			t.Errorf("%s: owner %q, want host-a:1", h.Key, h.Owner)
		}
		if left := time.Until(h.Expires); left <= 0 || left > 6*time.Second {
			t.Errorf("%s: expires in %v, want within the 5s TTL", h.Key, left)
		}
	}
	all, err := other.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[2].Key != "other" {
		t.Errorf("List() = %+v, want 3 holders", all)
	}
	for _, l := range held {
		l.Release(ctx)
	}
}

// Clients with different owners that share a Backend and a TTL are each
// listed with their own owner.
func TestListOwnerPerClient(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints), etcdlock.WithPrefix("owners-test/"))
	owners := map[string]string{"jobs/a": "host-a:1", "jobs/b": "host-b:2", "jobs/c": "host-a:1"}
	clients := map[string]*distlock.Client{}
	for _, o := range []string{"host-a:1", "host-b:2"} {
		clients[o] = newLockClient(t, b, distlock.WithTTL(5*time.Second), distlock.WithOwner(o))
	}
	for _, k := range []string{"jobs/a", "jobs/b", "jobs/c"} {
		l, err := clients[owners[k]].Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	hs, err := b.List(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 {
		t.Fatalf("List = %+v, want 3 holders", hs)
	}
	for _, h := range hs {
		if h.Owner != owners[h.Key] {
			t.Errorf("%s: owner %q, want %q", h.Key, h.Owner, owners[h.Key])
		}
	}
}
