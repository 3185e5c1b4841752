package redislock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redis/redact"
	"github.com/distlock/distlock/testserver"
)

// The lock scripts with shared grants, run on a random sequence of calls
// (exclusive and shared tries, waiting or not, releases, waiters leaving,
// grants lapsing, abandons): after every call, no lock key is set while
// a shared grant is live, every grant's token is above every earlier
// one's, and no shared grant, to a try or handed off to a waiter, goes to
// one that a live exclusive waiter still in the queue ranked before (a
// newcomer ranks after every waiter).
func TestSharedScriptsInvariants(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { db.Close() })
	b := &Backend{cfg: config{prefix: DefaultPrefix}}
	const key, live, ttl = "inv", "60000", "60000"
	type attempt struct {
		k      lockKeys
		shared bool
		waiter string
	}
	liveReaders := func(k lockKeys) int64 {
		tm, err := db.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := db.ZCount(ctx, k.readers, fmt.Sprint("(", tm.UnixMilli()), "+inf").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// writersBefore maps each member of the queue to the live exclusive
	// waiters that rank before it (by ZRANK: arrival order), and returns
	// all those in the queue (which must stop a newcomer's shared grant).
	writersBefore := func(k lockKeys) (map[string][]string, []string) {
		tm, err := db.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		q, err := db.ZRange(ctx, k.queue, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		before := make(map[string][]string, len(q))
		var writers []string
		for _, id := range q {
			before[id] = slices.Clone(writers)
			if d, err := db.ZScore(ctx, k.alive, id).Result(); err == nil && !strings.Contains(id, ":s") && int64(d) > tm.UnixMilli() {
				writers = append(writers, id)
			}
		}
		return before, writers
	}
	for seed := uint64(1); seed <= 12; seed++ {
		if err := db.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// Someone hears the waiters' wake channel: with "c" they are not
		// dropped as gone.
		sub := db.Subscribe(ctx, "distlock:waiters:B")
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, seed))
		var all []*attempt
		var last int64
		var log []string
		for step := range 400 {
			if len(all) == 0 || rng.IntN(3) == 0 {
				secret := testSecret(len(all))
				a := &attempt{k: b.keysFor(key, []byte(secret)), shared: rng.IntN(2) == 0}
				id := "B:" + secret
				if a.shared {
					id = "B:s" + secret
				}
				if rng.IntN(2) == 0 {
					a.waiter = id + "|" + secret + "|" + ttl + "|" + live + "|o"
				}
				all = append(all, a)
			}
			a := all[len(all)-1-min(len(all)-1, int(rng.ExpFloat64()*3))]
			k := a.k
			var op string
			var res any
			var err error
			// Before the call: who waits behind a live writer, and which
			// shared grants exist (a re-sent request of a live grant
			// confirms it: no new grant).
			behind, writerWaits := writersBefore(k)
			grantsBefore := db.ZRange(ctx, k.readers, 0, -1).Val()
			switch r := rng.IntN(12); {
			case r == 10:
				op = "lapse"
				db.Del(ctx, k.lock)
				db.ZAddXX(ctx, k.readers, redis.Z{Score: 0, Member: reveal(k.held)})
			case r == 11:
				op = "gone " + a.waiter
				db.ZRem(ctx, k.alive, a.waiter)
			case r < 6:
				flags := "c"
				if a.waiter != "" && rng.IntN(4) != 0 {
					flags += "j"
				}
				var args []any
				if a.shared {
					op = fmt.Sprintf("shared acquire %s flags=%q waiter=%q", reveal(k.held), flags, a.waiter)
					args = []any{nil, nil, 7, k.lock, k.token, k.queue, k.alive, k.readers, k.grants, k.done, reveal(k.held), ttl, "1", "o", flags}
					if a.waiter != "" {
						args = append(args, a.waiter, live)
					}
					res, err = runScript(ctx, db, sharedAcquire(), args).Result()
				} else {
					op = fmt.Sprintf("acquire %s flags=%q waiter=%q", reveal(k.held), "q"+flags, a.waiter)
					args = []any{nil, nil, 9, k.lock, k.token, k.queue, k.alive, reveal(k.tomb), k.last, k.watched, k.readers, k.grants,
						reveal(k.held), ttl, "|1|0|o", "q" + flags}
					if a.waiter != "" {
						args = append(args, a.waiter, live)
					}
					res, err = runScript(ctx, db, acquireScript(), args).Result()
				}
				if tok, ok := res.(int64); ok {
					if tok <= last {
						// A re-sent request confirms its own grant: the
						// same token.
						if !strings.Contains(fmt.Sprint(db.Get(ctx, k.lock).Val(), db.HGet(ctx, k.grants, reveal(k.held)).Val()), fmt.Sprint(tok)) {
							t.Fatalf("seed %d step %d: %s: token %d after %d\n%s", seed, step, op, tok, last, strings.Join(log, "\n"))
						}
					}
					last = max(last, tok)
				}
			default:
				force := r == 9
				waiter := ""
				if rng.IntN(2) == 0 {
					waiter = a.waiter
				}
				if a.shared {
					flags := "c"
					if force {
						flags += "f"
					}
					op = fmt.Sprintf("shared release %s flags=%q waiter=%q", reveal(k.held), flags, waiter)
					res, err = runScript(ctx, db, sharedRelease(), []any{nil, nil, 8, k.lock, k.token, k.queue, k.alive, k.watched,
						k.readers, k.grants, k.done, reveal(k.held), flags, waiter, 30000}).Result()
				} else {
					var member *redact.Secret
					if waiter != "" {
						w := redact.Bytes([]byte(waiter))
						member = &w
					}
					args := b.releaseArgs(&scriptArgs{lock: k.lock, last: k.last, queue: k.queue, alive: k.alive, token: k.token,
						watched: k.watched, readers: k.readers, grants: k.grants, tomb: reveal(k.tomb), held: reveal(k.held)}, member, 0)
					flags := "qc"
					if force {
						flags = "qcf"
						args = b.releaseArgs(&scriptArgs{lock: k.lock, last: k.last, queue: k.queue, alive: k.alive, token: k.token,
							watched: k.watched, readers: k.readers, grants: k.grants, tomb: reveal(k.tomb), held: reveal(k.held)}, member, 30*time.Second)
					}
					for i, v := range args {
						if v == nil && i > 2 {
							args[i] = flags
						}
					}
					op = fmt.Sprintf("release %s flags=%q waiter=%q", reveal(k.held), flags, waiter)
					res, err = runScript(ctx, db, releaseScript(), args).Result()
				}
			}
			log = append(log, fmt.Sprintf("%s -> %v %v", op, res, err))
			if err != nil {
				t.Fatalf("seed %d step %d: %s: %v\n%s", seed, step, op, err, strings.Join(log, "\n"))
			}
			// Every shared grant this call made, to the asker or handed
			// off to a waiter, went to one that no live exclusive waiter
			// ranked before in the queue (a newcomer: to none while a live
			// exclusive waiter was in the queue).
			for _, m := range db.ZRange(ctx, k.readers, 0, -1).Val() {
				if slices.Contains(grantsBefore, m) {
					continue
				}
				var owner *attempt
				for _, x := range all {
					if reveal(x.k.held) == m {
						owner = x
					}
				}
				var ahead []string
				queued := false
				if owner != nil && owner.waiter != "" {
					ahead, queued = behind[owner.waiter]
				}
				if !queued {
					ahead = writerWaits
				}
				// A writer that left the queue in this call (its own
				// release or abandon) no longer stops anyone.
				for _, w := range ahead {
					if db.ZScore(ctx, k.queue, w).Err() == nil {
						t.Fatalf("seed %d step %d: %s: %s granted while the live exclusive waiter %s waited before it (asker queued: %v)\n%s",
							seed, step, op, m, w, queued, strings.Join(log, "\n"))
					}
				}
			}
			// Hand-offs published on the channel draw tokens too.
			if tok, _ := db.Get(ctx, k.token).Int64(); tok > last {
				last = tok
			}
			if db.Exists(ctx, k.lock).Val() == 1 && liveReaders(k) > 0 {
				t.Fatalf("seed %d step %d: %s: the lock key is set while %d shared grants are live\n%s",
					seed, step, op, liveReaders(k), strings.Join(log, "\n"))
			}
		}
		sub.Close()
	}
}
