package redlock

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/testserver"
)

// The model's nodes (modelNode) answer as the real scripts do: random
// sequences of acquires, raises, releases, crashes and re-seeding on a
// real redis-server and on a modelNode give the same statuses and
// counters.
func TestModelNodeMatchesScripts(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	b := &Backend{cfg: config{prefix: DefaultPrefix}}
	k := b.keysFor("model")
	secret := func(id int) string { return "s" + strconv.Itoa(id) }
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 20 {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, b.marker(), "ok", 0).Err(); err != nil {
			t.Fatal(err)
		}
		m := modelNode{holder: -1}
		for step := range 60 {
			id := rng.IntN(4)
			var got, want int64
			var op string
			switch rng.IntN(6) {
			case 0, 1:
				op = "acquire"
				res, err := acquireScript.Run(ctx, rdb, []string{k.lock, k.token, k.tomb(secret(id)), b.marker(), k.queue, k.waiting, k.woken, k.watched}, secret(id), 60000, "o", int64(id%2), "b|"+secret(id), id, strconv.Itoa(id%2)).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				st, val := m.acquire(id)
				got, want = res[0], st
				if st == voteGranted && res[1] != val {
					t.Fatalf("run %d step %d: acquire token %d, model %d", run, step, res[1], val)
				}
			case 2:
				op = "raise"
				T := int64(rng.IntN(8) + 1)
				var err error
				if got, err = raiseScript.Run(ctx, rdb, []string{k.lock, k.token}, secret(id), T).Int64(); err != nil {
					t.Fatal(err)
				}
				want = m.raise(id, T)
			case 3:
				op = "release"
				force := rng.IntN(2) == 0
				var err error
				if got, err = b.release(ctx, rdb, k, secret(id), time.Minute, force); err != nil {
					t.Fatal(err)
				}
				want = m.release(id, force)
			case 4:
				op = "expire"
				rdb.Del(ctx, k.lock)
				m.holder = -1
			case 5:
				op = "crash and re-seed"
				rdb.FlushAll(ctx)
				m = modelNode{holder: -1, seed: seedNone}
				if st, _ := m.acquire(id); st != voteUnseeded {
					t.Fatal("model: not unseeded")
				}
				if v, _ := acquireScript.Run(ctx, rdb, []string{k.lock, k.token, k.tomb(secret(id)), b.marker(), k.queue, k.waiting, k.woken, k.watched}, secret(id), 60000, "o", int64(id%2), "b|"+secret(id), id, strconv.Itoa(id%2)).Int64Slice(); v[0] != voteUnseeded {
					t.Fatalf("a flushed node answers %v, want UNSEEDED", v)
				}
				// Its wait, copy and vote at once (no delays).
				c := int64(rng.IntN(5))
				markScript.Run(ctx, rdb, []string{b.marker()}, 0, 0)
				marker, _ := rdb.Get(ctx, b.marker()).Result()
				since, _ := strconv.ParseInt(strings.Split(strings.TrimPrefix(marker, "p:"), ":")[0], 10, 64)
				if ok, err := seedScript.Run(ctx, rdb, []string{b.marker(), k.token}, "1", since, c).Int64(); err != nil || ok != copyVotes {
					t.Fatalf("seed of marker %q: %d, %v", marker, ok, err)
				}
				m.seed, m.counter = seedOK, int8(c)
			}
			if got != want {
				t.Fatalf("run %d step %d: %s by %d: script %d, model %d", run, step, op, id, got, want)
			}
			c, _ := rdb.Get(ctx, k.token).Int64()
			if c != int64(m.counter) {
				t.Fatalf("run %d step %d after %s: counter %d, model %d", run, step, op, c, m.counter)
			}
		}
	}
}
