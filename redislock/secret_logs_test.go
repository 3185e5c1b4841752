package redislock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact"
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

// textSecrets is a go-redis hook that, while on, sends every redact.Secret
// argument as render shows it, as a client that writes such an argument
// as text (not through MarshalBinary) would; the arguments are restored
// after the call, since the Backend reuses them.
type textSecrets struct {
	on     atomic.Bool
	render func(any) string
}

func (h *textSecrets) swap(cmd redis.Cmder) (restore func()) {
	args := cmd.Args()
	orig := slices.Clone(args)
	for i, a := range args {
		switch a.(type) {
		case redact.Secret, *redact.Secret:
			args[i] = h.render(a)
		}
	}
	return func() { copy(args, orig) }
}

func (h *textSecrets) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *textSecrets) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.on.Load() {
			return next(ctx, cmd)
		}
		defer h.swap(cmd)()
		return next(ctx, cmd)
	}
}

func (h *textSecrets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.on.Load() {
			return next(ctx, cmds)
		}
		for _, cmd := range cmds {
			defer h.swap(cmd)()
		}
		return next(ctx, cmds)
	}
}

// dumpAll lists every key of the server with its value and whether it
// expires.
func dumpAll(ctx context.Context, t *testing.T, c *redis.Client) string {
	t.Helper()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		var v any
		switch typ := c.Type(ctx, k).Val(); typ {
		case "string":
			v = c.Get(ctx, k).Val()
		case "zset":
			v = c.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "hash":
			v = c.HGetAll(ctx, k).Val()
		default:
			v = typ
		}
		out = append(out, fmt.Sprintf("%s = %v (expires %v)", k, v, c.PTTL(ctx, k).Val() > 0))
	}
	return strings.Join(out, "\n")
}

// A client that sent a redact.Secret as text would send the same text as
// every grant's secret ("[secret]"), and two Backends' grants would match
// each other's: every script that takes a secret refuses one that is not
// of the secret's alphabet, with a clear error, before it writes anything.
// Acquires of every kind are refused, and so are the refreshes, releases
// and owner changes of live grants, which stay as they were.
func TestSecretSentAsTextIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		render func(any) string
	}{
		{"text", func(a any) string { return fmt.Sprint(a) }},
		{"json", func(a any) string { js, _ := json.Marshal(a); return string(js) }},
		{"empty", func(any) string { return "" }},
		{"lowercase", func(any) string { return "abcdefghijklmnopqrstuvwxyz" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t)
			ctx := testCtx(t)
			admin := newClient(t, srv.Addr)
			hook := &textSecrets{render: tc.render}
			c := newClient(t, srv.Addr)
			c.AddHook(hook)
			b := mustNew(t, c)
			t.Cleanup(func() { b.Close() })
			refused := func(what string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), "BADSECRET") || !strings.Contains(err.Error(), "redact.Secret as text") {
					t.Fatalf("%s with a secret sent as text: %v, want the script's refusal", what, err)
				}
			}
			opts := driver.AcquireOptions{TTL: time.Minute}
			wait := driver.AcquireOptions{TTL: time.Minute, Wait: true}

			// Acquires of every kind, on free keys and waiting for held
			// ones, write nothing.
			hook.on.Store(true)
			_, err := b.Acquire(ctx, "free", opts)
			refused("Acquire", err)
			_, err = b.AcquireShared(ctx, "free-shared", opts)
			refused("AcquireShared", err)
			_, err = b.AcquirePermit(ctx, "free-permits", driver.Semaphore{Limit: 2}, opts)
			refused("AcquirePermit", err)
			if d := dumpAll(ctx, t, admin); d != "" {
				t.Fatalf("refused acquires wrote:\n%s", d)
			}

			// Live grants of b's, made while it sends its secrets right.
			hook.on.Store(false)
			var ls []driver.Lease
			for _, key := range []string{"x", "y"} {
				l, err := b.Acquire(ctx, key, opts)
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			s, err := b.AcquireShared(ctx, "shared", opts)
			if err != nil {
				t.Fatal(err)
			}
			p, err := b.AcquirePermit(ctx, "permits", driver.Semaphore{Limit: 1, Slots: true}, opts)
			if err != nil {
				t.Fatal(err)
			}
			before := dumpAll(ctx, t, admin)

			hook.on.Store(true)
			_, err = b.Acquire(ctx, "x", wait)
			refused("a waiting Acquire", err)
			_, err = b.AcquireShared(ctx, "x", wait)
			refused("a waiting AcquireShared", err)
			_, err = b.AcquirePermit(ctx, "permits", driver.Semaphore{Limit: 1, Slots: true}, wait)
			refused("a waiting AcquirePermit", err)
			for _, l := range []driver.Lease{ls[0], s, p} {
				_, err = l.Refresh(ctx, time.Hour)
				refused("Refresh", err)
			}
			for _, batch := range [][]driver.Lease{ls[:1], ls, {ls[0], s, p}} {
				for _, r := range b.RefreshAll(ctx, batch, time.Hour) {
					refused("RefreshAll", r.Err)
				}
			}
			refused("SetOwner", ls[0].(driver.OwnerSetter).SetOwner(ctx, "thief"))
			for _, l := range []driver.Lease{ls[0], s, p} {
				refused("Release", l.Release(ctx))
			}
			if after := dumpAll(ctx, t, admin); after != before {
				t.Fatalf("refused calls changed the keys:\nbefore:\n%s\nafter:\n%s", before, after)
			}

			// The grants held throughout.
			hook.on.Store(false)
			for _, l := range append(ls, s, p) {
				if _, err := l.Refresh(ctx, time.Minute); err != nil {
					t.Fatalf("a grant after the refused calls: %v", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
