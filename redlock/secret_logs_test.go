package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact/redacttest"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
)

// A grant's secret lets whoever knows it refresh or release the grant on
// the nodes: it stays out of what a hook that logs commands sees, their
// arguments (the scripts' KEYS and ARGV) and their replies, on every path
// that sends it or reads it: a try granted (with the raising round),
// refused, and cleaned up after a split; a waiter queued and granted, and
// one that gave up and left the queue; Refresh, RefreshAll (one call per
// node for a *redis.Client, one per lease for another client), Release;
// Holder, List and WatchHolder. Nor does a key on the nodes carry it in
// its name (the tombstones).
func TestSecretStaysOutOfCommandLogs(t *testing.T) {
	srvs := startNodes(t, 3)
	ctx := testCtx(t)
	var log redacttest.CommandLog
	var nodes []redlock.Node
	var admin []*redis.Client
	for i, s := range srvs {
		c := newClient(t, s.Addr)
		c.AddHook(&log)
		if i == len(srvs)-1 {
			// Not a *redis.Client: RefreshAll refreshes each lease apart.
			nodes = append(nodes, otherClient{c})
		} else {
			nodes = append(nodes, c)
		}
		admin = append(admin, newClient(t, s.Addr))
	}
	b := newBackendOf(t, nodes)
	var mu sync.Mutex
	var secrets []string
	redlock.OnSecret(b, func(s string) {
		mu.Lock()
		secrets = append(secrets, s)
		mu.Unlock()
	})
	other := newBackend(t, addrs(srvs)) // not logged: holds keys for b to meet
	opts := driver.AcquireOptions{TTL: time.Minute, Owner: "logged"}
	prefix := func(key string) string { return redlock.DefaultPrefix + redislock.HashTag(key) }

	// Granted with the raising round: node 1's counter is a step ahead, so
	// the votes disagree and the grant's token, 2, is raised on the others.
	if err := admin[0].Incr(ctx, prefix("raised")+":token").Err(); err != nil {
		t.Fatal(err)
	}
	raised, err := b.Acquire(ctx, "raised", opts)
	if err != nil {
		t.Fatal(err)
	}
	if raised.Token() != 2 {
		t.Fatalf("token %d, want 2 (raised)", raised.Token())
	}
	plain, err := b.Acquire(ctx, "plain", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raised.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]driver.Lease{{raised}, {raised, plain}} {
		for _, r := range b.RefreshAll(ctx, batch, time.Minute) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	if h, ok, err := b.Holder(ctx, "raised"); err != nil || !ok || h.Token != 2 || h.Owner != "logged" {
		t.Fatalf("Holder: %+v, %v, %v; want the grant of token 2", h, ok, err)
	}
	if hs, err := b.List(ctx, ""); err != nil || len(hs) != 2 {
		t.Fatalf("List: %+v, %v; want the 2 grants", hs, err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	woken, err := b.WatchHolder(wctx, "raised")
	if err != nil {
		t.Fatal(err)
	}
	if err := raised.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(30 * time.Second):
		t.Fatal("the watch was not woken by the release")
	}
	stopWatch()
	if err := plain.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Refused: another Backend holds the key.
	held, err := other.Acquire(ctx, "held", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "held", opts); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key: %v, want ErrNotAcquired", err)
	}
	// A split: nodes 1 and 2 hold the key for someone else, node 3 grants
	// the try, which is cleaned up there (its tombstone written).
	for _, a := range admin[:2] {
		if err := a.Set(ctx, prefix("split")+":lock", "other|1|0|o", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Acquire(ctx, "split", opts); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("Acquire of a key held on 2 of 3 nodes: %v, want ErrNotAcquired", err)
	}
	if n := admin[2].Exists(ctx, prefix("split")+":lock").Val(); n != 0 {
		t.Fatal("the try's grant on node 3 was not cleaned up")
	}
	// A waiter that gives up: it queued on every node, then leaves the
	// queue.
	queued := func() bool {
		for _, a := range admin {
			if a.ZCard(ctx, queueKey("held")).Val() != 1 {
				return false
			}
		}
		return true
	}
	short, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := b.Acquire(short, "held", driver.AcquireOptions{TTL: time.Minute, Wait: true})
		gaveUp <- err
	}()
	eventually(t, 30*time.Second, "the waiter queued on every node", queued)
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("acquired a held key")
	}
	eventually(t, 30*time.Second, "the waiter left the queue on every node", func() bool {
		for _, a := range admin {
			if a.ZCard(ctx, queueKey("held")).Val() != 0 {
				return false
			}
		}
		return true
	})
	// A waiter queued, woken by the release and granted.
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "held", driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 30*time.Second, "the waiter queued on every node", queued)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The tombstones are there, none named by a secret.
	mu.Lock()
	defer mu.Unlock()
	if len(secrets) < 6 {
		t.Fatalf("%d secrets drawn, want one per try", len(secrets))
	}
	tombs := 0
	for i, a := range admin {
		keys, err := a.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.Contains(k, ":released:") {
				tombs++
			}
			for _, s := range secrets {
				if strings.Contains(k, s) {
					t.Errorf("node %d has a key named by a secret: %s", i+1, k)
				}
			}
		}
	}
	if tombs == 0 {
		t.Error("no tombstone on the nodes")
	}
	// Every request of b has been answered once it is closed.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for name, hash := range redlock.ScriptHashes() {
		if name == "seed" || name == "pass" {
			continue // no node to re-seed; no waiter returned as it was woken
		}
		found := false
		for _, s := range log.Commands() {
			if strings.HasPrefix(s, "evalsha "+hash+" ") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no %s.lua call logged", name)
		}
	}
	for _, c := range log.Renderings() {
		for _, s := range secrets {
			if strings.Contains(c, s) {
				t.Fatalf("a logged command shows a secret: %.300s", c)
			}
		}
	}
}
