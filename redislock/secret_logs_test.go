package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact/redacttest"
	"github.com/distlock/distlock/redislock"
)

// A grant's secret lets whoever knows it release the grant: it stays out
// of what a command-logging hook sees, also for a waiter, whose place in
// the queue carries it, and a waiter that gives up and leaves the queue;
// and out of the replies of the reads of live grants, exclusive, shared
// and permits (Holder, List, a holder watch and its re-read, Readers,
// Permits), which read the values that begin with, or are filed under,
// the grants' secrets.
func TestSecretStaysOutOfCommandLogs(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	var log redacttest.CommandLog
	c := newClient(t, srv.Addr)
	c.AddHook(&log)
	b := mustNew(t, c)
	t.Cleanup(func() { b.Close() })
	key := "logged"
	holder := newBackend(t, srv.Addr)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{redislock.LeaseSecret(lh)}
	// Shared grants and permits, live while b reads them.
	sharedKey, permitKey := key+"-shared", key+"-permits"
	for range 2 {
		s, err := holder.AcquireShared(ctx, sharedKey, driver.AcquireOptions{TTL: time.Minute, Owner: "reader"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := holder.AcquirePermit(ctx, permitKey, driver.Semaphore{Limit: 2, Slots: true}, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, redislock.LeaseSecret(s), redislock.LeaseSecret(p))
	}
	// reads reads every grant through b, the exclusive one's token being
	// want.
	reads := func(want uint64) {
		t.Helper()
		if h, ok, err := b.Holder(ctx, key); err != nil || !ok || h.Token != want {
			t.Fatalf("Holder: %+v %v %v, want token %d", h, ok, err, want)
		}
		hs, err := b.List(ctx, key)
		if err != nil || len(hs) != 3 || hs[0].Token != want || !hs[1].Shared || !hs[2].Shared {
			t.Fatalf("List: %+v %v, want the exclusive grant %d and two shared", hs, err, want)
		}
		if rs, err := b.Readers(ctx, sharedKey); err != nil || len(rs) != 2 {
			t.Fatalf("Readers: %+v %v, want two", rs, err)
		}
		if st, err := b.Permits(ctx, permitKey); err != nil || len(st.Holders) != 2 {
			t.Fatalf("Permits: %+v %v, want two", st, err)
		}
	}
	reads(lh.Token())
	// A holder watch, woken by the hand-off below, then reads again.
	watch, err := b.WatchHolder(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that gives up: it queued (its queue member, which holds its
	// secret, read here), then leaves.
	admin := newClient(t, srv.Addr)
	short, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := b.Acquire(short, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		gaveUp <- err
	}()
	var member []string
	eventually(t, 10*time.Second, "the waiter queued", func() bool {
		member = admin.ZRange(ctx, queueKey(key), 0, -1).Val()
		return len(member) == 1
	})
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("acquired a held key")
	}
	fields := strings.Split(member[0], "|")
	if len(fields) < 5 || len(fields[1]) < 16 {
		t.Fatalf("queue member %q, want <id>|<secret>|...", member[0])
	}
	quitter := fields[1]
	eventually(t, 10*time.Second, "the waiter left the queue", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 0 })
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder watch was not woken by the hand-off")
	}
	reads(l.Token())
	secrets = append(secrets, redislock.LeaseSecret(l), quitter)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r, ok := log.Shows(secrets...); ok {
		t.Fatalf("a logged command shows a secret: %.300s", r)
	}
	if len(log.Commands()) < 3 {
		t.Fatalf("%d commands logged, want the tries and releases", len(log.Commands()))
	}
	for _, s := range log.Commands() {
		// A queue member and a grant's value prefix are the only arguments
		// of a script call with a '|', and both hold a secret (a script
		// loaded with EVAL has them in its source). The reply follows the
		// arguments after ": ", which none of them holds here; those of the
		// reads hold '|' but no secret (checked above).
		args, _, _ := strings.Cut(s, ": ")
		if strings.HasPrefix(args, "evalsha ") && strings.Contains(args, "|") {
			t.Fatalf("a logged command shows a secret: %.300s", s)
		}
	}
}

// A holder's refreshes (Refresh, and RefreshAll's batch of one and of
// many) carry the grant's secret too: it stays out of the logs as well.
func TestSecretStaysOutOfRefreshLogs(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	var log redacttest.CommandLog
	c := newClient(t, srv.Addr)
	c.AddHook(&log)
	b := mustNew(t, c)
	t.Cleanup(func() { b.Close() })
	var ls []driver.Lease
	for _, key := range []string{"refreshed-a", "refreshed-b"} {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if _, err := ls[0].Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]driver.Lease{ls[:1], ls} {
		for _, r := range b.RefreshAll(ctx, batch, time.Minute) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	for _, l := range ls {
		if r, ok := log.Shows(redislock.LeaseSecret(l)); ok {
			t.Fatalf("a logged command shows a secret: %.300s", r)
		}
	}
}
