package redislock_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// previousScripts are the acquire and release scripts of the version
// before issue 29 (testdata/previous, with that version's queue.lua),
// called as that version calls them: a Backend of each version may run
// against the same keys during a rolling upgrade.
type previousScripts struct {
	acquire, release *redis.Script
}

func loadPrevious(t *testing.T) previousScripts {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	queue := read("testdata/previous/queue.lua")
	with := func(name string) *redis.Script {
		return redis.NewScript(strings.Replace(read(name), "--[[queue.lua]]\n", queue, 1))
	}
	return previousScripts{acquire: with("testdata/previous/acquire.lua"), release: with("testdata/previous/release.lua")}
}

// previousKeys are the keys of the previous scripts, in their order (those
// of this version).
func previousKeys(key string) (acquire, release []string) {
	base := redislock.DefaultPrefix + redislock.HashTag(key)
	lock, token, queue, alive, last := base+":lock", base+":token", base+":queue", base+":alive", base+":last"
	watched, readers, grants := base+":watched", base+":readers", base+":reader-grants"
	return []string{lock, token, queue, alive, "", last, watched, readers, grants},
		[]string{lock, last, queue, alive, token, watched, readers, grants}
}

// Grants, releases, retried releases and late copies of either version are
// read alike by the other, and a release of either hands the lock to the
// waiters of both, in their order: the key layout and the lock key's value
// did not change, only the commands the scripts run (issue 29).
func TestPreviousVersionSharesKeys(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	old := loadPrevious(t)
	b := newBackend(t, srv.Addr)
	const key = "upgrade"
	opts := driver.AcquireOptions{TTL: time.Minute}
	// oldTry is a try of the previous version, waiting (queued as waiter)
	// or not.
	oldTry := func(secret, waiter string) any {
		t.Helper()
		ka, _ := previousKeys(key)
		ka[4] = redislock.DefaultPrefix + redislock.HashTag(key) + ":released:" + secret
		args := []any{secret + "|", 60000, fmt.Sprintf("|%d|0|old", time.Now().UnixMilli()), "qc"}
		if waiter != "" {
			args[3] = "qcj"
			args = append(args, waiter, 60000)
		}
		res, err := old.acquire.Run(ctx, c, ka, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	oldAcquire := func(secret string) any { t.Helper(); return oldTry(secret, "") }
	oldRelease := func(secret string) int64 {
		t.Helper()
		_, kr := previousKeys(key)
		n, err := old.release.Run(ctx, c, kr, secret+"|", "qc").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	status := func(res any) any {
		if r, ok := res.([]any); ok {
			return r[0]
		}
		return "granted"
	}

	// A grant of the previous version keeps the new one out; its release
	// lets it in, with a higher token.
	res := oldAcquire("OLDSECRETA")
	oldToken, ok := res.(int64)
	if !ok {
		t.Fatalf("previous acquire: %v, want granted", res)
	}
	if _, err := b.Acquire(ctx, key, opts); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("Acquire while the previous version holds the key: %v, want ErrNotAcquired", err)
	}
	if n := oldRelease("OLDSECRETA"); n != 1 {
		t.Fatalf("previous release: %d, want released", n)
	}
	l, err := b.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= uint64(oldToken) {
		t.Fatalf("token %d after the previous version's %d", l.Token(), oldToken)
	}
	// The other way round: a grant of the new version keeps the previous
	// one out, and its release is remembered for both.
	secret := redislock.LeaseSecret(l)
	if res := oldAcquire("OLDSECRETB"); status(res) != int64(0) {
		t.Fatalf("previous acquire while the new version holds the key: %v, want held", res)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := oldRelease(secret); n != 2 {
		t.Fatalf("previous release retried after the new one: %d, want already released", n)
	}
	if res := oldAcquire(secret); status(res) != int64(3) {
		t.Fatalf("previous acquire, a late copy of the released grant's request: %v, want too late", res)
	}
	// A late copy read by the new version, of a grant released by the
	// previous one.
	if res := oldAcquire("OLDSECRETC"); status(res) != "granted" {
		t.Fatalf("previous acquire: %v, want granted", res)
	}
	if n := oldRelease("OLDSECRETC"); n != 1 {
		t.Fatalf("previous release: %d, want released", n)
	}
	if got := redislock.TryWithSecret(ctx, b, key, "OLDSECRETC", opts); got != "too late" {
		t.Fatalf("a try with the previous version's released secret: %s, want too late", got)
	}
	l, err = b.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}

	// One queue: a waiter of the previous version queues while the new
	// version holds the key, a waiter of the new one after it; the new
	// release hands the lock to the first, whose release (by the previous
	// version) hands it to the second.
	sub := c.Subscribe(ctx, redislock.DefaultPrefix+"waiters:OLD")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	const oldWaiter = "OLD:W1|OLDSECRETD|60000|60000|old"
	if res := oldTry("OLDSECRETD", oldWaiter); status(res) != int64(0) {
		t.Fatalf("previous waiting try while the new version holds the key: %v, want held", res)
	}
	waiter := newBackend(t, srv.Addr)
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 30*time.Second, "both waiters queued", func() bool { return c.ZCard(ctx, queueKey(key)).Val() == 2 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg.Payload, "OLD:W1|") {
		t.Fatalf("hand-off to the previous version's waiter: %q", msg.Payload)
	}
	if v := c.Get(ctx, lockKey(key)).Val(); !strings.HasPrefix(v, "OLDSECRETD|") {
		t.Fatalf("lock key after the hand-off: %q, want the previous version's waiter's grant", v)
	}
	if n := oldRelease("OLDSECRETD"); n != 1 {
		t.Fatalf("previous release of the handed grant: %d, want released", n)
	}
	l = <-got
	if l == nil {
		t.FailNow()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
