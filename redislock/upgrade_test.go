package redislock_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// previousScripts are the acquire and release scripts of the release
// before their arguments were shortened (testdata/previous), called as
// that version called them: a Backend of each version may run against the
// same keys during a rolling upgrade.
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
	queue := read("scripts/queue.lua")
	return previousScripts{
		acquire: redis.NewScript(queue + read("testdata/previous/acquire.lua")),
		release: redis.NewScript(queue + read("testdata/previous/release.lua")),
	}
}

// previousKeys are the keys of the previous scripts, in their order.
func previousKeys(key, secret string) (acquire, release []string) {
	base := redislock.DefaultPrefix + redislock.HashTag(key)
	lock, token, queue, alive, tomb, last := base+":lock", base+":token", base+":queue", base+":alive", base+":released:"+secret, base+":last"
	return []string{lock, token, queue, alive, tomb, last}, []string{lock, tomb, queue, alive, last, token}
}

// Grants, releases, retried releases and late copies of either version are
// read alike by the other: the key layout and the lock key's value did
// not change, only how the scripts take their arguments.
func TestPreviousVersionSharesKeys(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	old := loadPrevious(t)
	b := newBackend(t, srv.Addr)
	const key = "upgrade"
	opts := driver.AcquireOptions{TTL: time.Minute}
	oldAcquire := func(secret string) []any {
		t.Helper()
		ka, _ := previousKeys(key, secret)
		res, err := old.acquire.Run(ctx, c, ka, secret, 60000, time.Now().UnixMilli(), "old", "qc").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	oldRelease := func(secret string) int64 {
		t.Helper()
		_, kr := previousKeys(key, secret)
		n, err := old.release.Run(ctx, c, kr, secret, "qc", "").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A grant of the previous version keeps the new one out; its release
	// lets it in, with a higher token.
	res := oldAcquire("OLDSECRET1")
	if res[0] != int64(1) {
		t.Fatalf("previous acquire: %v, want granted", res)
	}
	oldToken := res[1].(int64)
	if _, err := b.Acquire(ctx, key, opts); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("Acquire while the previous version holds the key: %v, want ErrNotAcquired", err)
	}
	if n := oldRelease("OLDSECRET1"); n != 1 {
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
	if res := oldAcquire("OLDSECRET2"); res[0] != int64(0) {
		t.Fatalf("previous acquire while the new version holds the key: %v, want held", res)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := oldRelease(secret); n != 2 {
		t.Fatalf("previous release retried after the new one: %d, want already released", n)
	}
	if res := oldAcquire(secret); res[0] != int64(3) {
		t.Fatalf("previous acquire, a late copy of the released grant's request: %v, want too late", res)
	}
	// A late copy read by the new version, of a grant released by the
	// previous one.
	if res := oldAcquire("OLDSECRET3"); res[0] != int64(1) {
		t.Fatalf("previous acquire: %v, want granted", res)
	}
	if n := oldRelease("OLDSECRET3"); n != 1 {
		t.Fatalf("previous release: %d, want released", n)
	}
	if got := redislock.TryWithSecret(ctx, b, key, "OLDSECRET3", opts); got != "too late" {
		t.Fatalf("a try with the previous version's released secret: %s, want too late", got)
	}
	if l, err := b.Acquire(ctx, key, opts); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
