package redislock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/testserver"
)

// The acquire and release scripts, run side by side with those of the
// previous version (testdata/previous, with its queue.lua) on two
// databases of one server, one random sequence of calls each: every call
// must get the same reply and leave the same keys, or the scripts do not
// implement the same lock (and Backends of both versions could not share
// keys). The secrets include ones that are the start or the end of
// another, and the owners '|' and '%'. Between the calls, waiters' liveness
// lapses, the key is watched or not, and shared grants come and lapse.
//
// A queue member without a liveness entry (a waiter whose liveness entry
// was lost, "gone" below) is dropped at the head by a hand-off and by a
// try that finds the key free, but no longer by a waiting try that finds
// the key held (issue 29: that try does not read who is first). The keys
// are therefore compared modulo such members at the head of the queue,
// and the queue's order without its scores (a place taken after a member
// that one version dropped and the other not has another number, not
// another rank); and a gone waiter does not try again (its try would keep
// its place in one version and go to the back in the other).
func TestScriptsMatchPreviousVersion(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	oldDB := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 0})
	newDB := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 1})
	t.Cleanup(func() { oldDB.Close(); newDB.Close() })
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	oldQueue := read("testdata/previous/queue.lua")
	oldAcquire := redis.NewScript(strings.Replace(read("testdata/previous/acquire.lua"), queueMarker, oldQueue, 1))
	oldRelease := redis.NewScript(strings.Replace(read("testdata/previous/release.lua"), queueMarker, oldQueue, 1))

	b := &Backend{cfg: config{prefix: DefaultPrefix}}
	owners := []string{"", "o|w%1", "x"}
	modes := []string{"q", "qc", "", "c"}
	const key, since, live, ttl = "diff", "1700000000000", "60000", "60000"

	// attempt is one Acquire: its secret and owner, and whether it queues.
	type attempt struct {
		secret, owner, waiter string
		gone                  bool // its liveness entry was lost
	}
	for seed := uint64(1); seed <= 24; seed++ {
		if err := oldDB.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, seed))
		mode := modes[seed%uint64(len(modes))]
		if seed%8 < 4 {
			// Someone hears the waiters' wake channel: with "c" they
			// are not dropped as gone.
			sub := oldDB.Subscribe(ctx, "distlock:waiters:B")
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
		}
		var all []*attempt
		var log []string
		for step := range 500 {
			if len(all) == 0 || rng.IntN(4) == 0 {
				// A new attempt; its secret is now and then another's
				// with more before or after it, or its start.
				secret := testSecret(len(all))
				if len(all) > 0 && rng.IntN(3) == 0 {
					other := all[rng.IntN(len(all))].secret
					switch rng.IntN(3) {
					case 0:
						secret = other + "X"
					case 1:
						secret = "Y" + other
					default:
						if len(other) > 1 {
							secret = other[:len(other)-1]
						}
					}
				}
				a := &attempt{secret: secret, owner: owners[rng.IntN(len(owners))]}
				if rng.IntN(2) == 0 {
					// Now and then a waiter whose id is that of a
					// shared one: a hand-off grants it a shared grant.
					kind := ""
					if rng.IntN(6) == 0 {
						kind = "s"
					}
					a.waiter = "B:" + kind + secret + "|" + secret + "|" + ttl + "|" + live + "|" + a.owner
				}
				all = append(all, a)
			}
			// Recent attempts mostly; old ones for late copies.
			a := all[len(all)-1-min(len(all)-1, int(rng.ExpFloat64()*3))]
			k := b.keysFor(key, []byte(a.secret))
			var op string
			var oldRes, newRes any
			var oldErr, newErr error
			// both runs one change of the keys in both databases.
			both := func(name string, do func(c *redis.Client) (any, error)) {
				op = name
				oldRes, oldErr = do(oldDB)
				newRes, newErr = do(newDB)
			}
			switch r := rng.IntN(15); {
			case r == 10: // the grant lapses (in both at once)
				both("lapse", func(c *redis.Client) (any, error) { return c.Del(ctx, k.lock).Result() })
			case r == 11: // a waiter stopped refreshing its place: its deadline passed
				both("lapsed "+a.waiter, func(c *redis.Client) (any, error) {
					return c.ZAddXX(ctx, k.alive, redis.Z{Score: 1, Member: a.waiter}).Result()
				})
			case r == 14: // a waiter's liveness entry is lost
				a.gone = a.waiter != ""
				both("gone "+a.waiter, func(c *redis.Client) (any, error) { return c.ZRem(ctx, k.alive, a.waiter).Result() })
			case r == 12: // a Backend starts or stops watching the key's holder
				if rng.IntN(2) == 0 {
					both("watch", func(c *redis.Client) (any, error) { return c.Set(ctx, k.watched, "1", time.Minute).Result() })
				} else {
					both("unwatch", func(c *redis.Client) (any, error) { return c.Del(ctx, k.watched).Result() })
				}
			case r == 13: // a shared grant is made, or lapses
				score, name := float64(4e12), "share"
				if rng.IntN(2) == 0 {
					score, name = 1, "share lapsed"
				}
				member := fmt.Sprintf("R%d|", rng.IntN(2))
				both(name+" "+member, func(c *redis.Client) (any, error) {
					if err := c.ZAdd(ctx, k.readers, redis.Z{Score: score, Member: member}).Err(); err != nil {
						return nil, err
					}
					if err := c.HSet(ctx, k.grants, member, "7|0|r").Err(); err != nil {
						return nil, err
					}
					c.PExpire(ctx, k.readers, time.Minute)
					return c.PExpire(ctx, k.grants, time.Minute).Result()
				})
			case r < 5: // a try, single or waiting
				flags := mode
				waiter := a.waiter
				if a.gone {
					waiter = ""
				}
				if waiter != "" && rng.IntN(4) != 0 {
					flags += "j"
				}
				op = fmt.Sprintf("acquire %s flags=%q waiter=%q", a.secret, flags, waiter)
				keys := []string{k.lock, k.token, k.queue, k.alive, reveal(k.tomb), k.last, k.watched, k.readers, k.grants}
				args := []any{a.secret + "|", ttl, "|" + since + "|0|" + a.owner, flags}
				if waiter != "" {
					args = append(args, waiter, live)
				}
				oldRes, oldErr = oldAcquire.Run(ctx, oldDB, keys, args...).Result()
				newRes, newErr = acquireScript().Run(ctx, newDB, keys, args...).Result()
				oldRes, newRes = withoutTimes(oldRes), withoutTimes(newRes)
			default: // a release, a waiter leaving, an abandon
				force := r == 9
				waiter := ""
				if rng.IntN(2) == 0 {
					waiter = a.waiter
				}
				flags := mode
				keys := []string{k.lock, k.last, k.queue, k.alive, k.token, k.watched, k.readers, k.grants}
				args := []any{a.secret + "|", flags}
				if waiter != "" || force {
					args = append(args, waiter)
				}
				if force {
					args[1] = flags + "f"
					args = append(args, "30000")
					keys = append(keys, reveal(k.tomb))
				}
				op = fmt.Sprintf("release %s flags=%q waiter=%q", a.secret, args[1], waiter)
				oldRes, oldErr = oldRelease.Run(ctx, oldDB, keys, args...).Result()
				newRes, newErr = releaseScript().Run(ctx, newDB, keys, args...).Result()
			}
			log = append(log, op)
			if fmt.Sprint(oldRes, oldErr) != fmt.Sprint(newRes, newErr) {
				t.Fatalf("seed %d step %d: %s: previous %v %v, now %v %v\nafter:\n%s",
					seed, step, op, oldRes, oldErr, newRes, newErr, strings.Join(log, "\n"))
			}
			if o, n := dumpKeys(ctx, t, oldDB), dumpKeys(ctx, t, newDB); o != n {
				t.Fatalf("seed %d step %d: %s: keys differ:\nprevious:\n%s\nnow:\n%s\nafter:\n%s",
					seed, step, op, o, n, strings.Join(log, "\n"))
			}
		}
	}
}

// testSecret returns the secret of a test's nth attempt, "S" and n in
// letters: of the alphabet of a secret (base32), which the scripts demand.
func testSecret(n int) string {
	s := []byte{'S'}
	for {
		s = append(s, byte('A'+n%26))
		if n /= 26; n == 0 {
			return string(s)
		}
	}
}

// withoutTimes replaces the times in a refusal ({HELD, pttl[, seen]},
// {NOT_FIRST, ms[, seen]}) by their sign: the two runs read the clock at
// different moments.
func withoutTimes(res any) any {
	r, ok := res.([]any)
	if !ok || len(r) < 2 || (r[0] != int64(acquireHeld) && r[0] != int64(acquireNotFirst)) {
		return res
	}
	r = slices.Clone(r)
	if ms, _ := r[1].(int64); ms > 0 {
		r[1] = "+"
	}
	return r
}

// dumpScript lists a database's keys, their values (without the grant's
// time, which the hand-off takes from the server's clock, nor the waiters'
// liveness deadlines) and whether they expire, in one call. A queue is
// listed in order, without its scores and without the members at its head
// that have no liveness entry (see TestScriptsMatchPreviousVersion), and
// not at all if that leaves none.
var dumpScript = redis.NewScript(`
local keys = redis.call('KEYS', '*')
table.sort(keys)
local out = {}
for _, k in ipairs(keys) do
  local typ = redis.call('TYPE', k).ok
  local v = typ
  if typ == 'string' then
    v = string.gsub(redis.call('GET', k), '^([^|]*|[^|]*|)[^|]*', '%1T')
  elseif typ == 'zset' then
    if string.sub(k, -6) == ':queue' then
      local alive = string.sub(k, 1, -7) .. ':alive'
      local m = redis.call('ZRANGE', k, 0, -1)
      local i = 1
      while i <= #m and not redis.call('ZSCORE', alive, m[i]) do
        i = i + 1
      end
      v = nil
      if i <= #m then
        v = table.concat(m, ' ', i)
      end
    else
      local m = redis.call('ZRANGE', k, 0, -1)
      table.sort(m)
      v = table.concat(m, ' ')
    end
  end
  if v then
    table.insert(out, k .. ' = ' .. v .. ' (expires ' .. tostring(redis.call('PTTL', k) > 0) .. ')')
  end
end
return table.concat(out, '\n')
`)

func dumpKeys(ctx context.Context, t *testing.T, c *redis.Client) string {
	t.Helper()
	s, err := dumpScript.Run(ctx, c, nil).Text()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
