package redislock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/redislock"
)

// fastPathStep is one variant of a script in BenchmarkFastPathCost: body
// runs on the real arguments of an uncontended try or release (an empty
// body: the package's own script).
type fastPathStep struct {
	name string
	body string
}

// The steps of the uncontended try, each the one before plus one part of
// acquire.lua's common path, the last one that path whole; the KEYS and
// ARGV are those of acquire.lua.
var acquireSteps = []fastPathStep{
	{"arguments alone (9 keys, 4 arguments), empty script", `return 0`},
	{"+ the secret's check (a Lua pattern)", fastPathCheck + `return 0`},
	{"+ EXISTS of the 5 keys the try checks, each named once", fastPathCheck + `local n = redis.call('EXISTS', KEYS[1], KEYS[5], KEYS[3], KEYS[7], KEYS[8]) return 0`},
	{"the same EXISTS naming them 16 times (which tells which exist)", fastPathCheck + fastPathExists + `return 0`},
	{"+ GET of the last release", fastPathCheck + fastPathExists + fastPathLast + `return 0`},
	{"+ INCR of the counter", fastPathCheck + fastPathExists + fastPathLast + `local token = redis.call('INCR', KEYS[2]) return 0`},
	{"+ SET PX of the grant (the common path whole)", fastPathCheck + fastPathExists + fastPathLast +
		`local token = redis.call('INCR', KEYS[2]) redis.call('SET', KEYS[1], ARGV[1] .. token .. ARGV[3], 'PX', ARGV[2]) return token`},
	{"acquire.lua", ""},
}

// The steps of the release of a grant that nobody waited for.
var releaseSteps = []fastPathStep{
	{"arguments alone (8 keys, 2 arguments), empty script", `return 0`},
	{"+ the secret's check", fastPathCheck + `return 0`},
	{"+ GET of the lock", fastPathCheck + `local v = redis.call('GET', KEYS[1]) return 0`},
	{"+ RENAME to the last release", fastPathCheck +
		`local v = redis.call('GET', KEYS[1]) if v and string.find(v, ARGV[1], 1, true) == 1 then redis.call('RENAME', KEYS[1], KEYS[2]) end return 0`},
	{"release.lua (+ its flags and the waited-for check)", ""},
}

const (
	fastPathCheck  = `if not string.find(ARGV[1], '^[A-Z2-7]+|$') then return redis.error_reply('BADSECRET') end `
	fastPathExists = `local n = redis.call('EXISTS', KEYS[1], KEYS[5], KEYS[3], KEYS[3], KEYS[7], KEYS[7], KEYS[7], KEYS[7], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8]) `
	fastPathLast   = `local last = redis.call('GET', KEYS[6]) if last and string.find(last, ARGV[1], 1, true) == 1 then return 0 end `
)

// tokenGrant is the token floor's try: a fencing token and SET NX PX in
// one script.
var tokenGrant = redis.NewScript(`local t = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return t end
return 0`)

// BenchmarkFastPathCost itemizes the server time of an uncontended cycle:
// the scripts' common paths built up one part at a time on the real
// arguments, each part's cost being its step's time less the step before,
// beside the floor (SET NX PX, compare-and-delete) and the token floor
// (a script that draws a token by INCR and sets the lock by SET NX PX,
// then compare-and-delete). Each round starts on an empty database
// (FLUSHDB, not timed), so that the keys it leaves do not make the next
// rounds' lookups dearer: the figures are those of a keyspace that fits
// the CPU's caches, where a large one adds a cache miss to each key
// looked up. In a round each try step runs on 100 keys of its own,
// pipelined, the steps taking turns in a rotating order; then each
// release step on 100 grants of its own, made beforehand by acquire.lua,
// in a rotating order; then the floor and the token floor. The time is INFO commandstats'
// (the script's own and its commands'), per call. Run it alone (-v: the
// whole table is longer than the 10 lines a benchmark's log keeps
// without it):
//
//	go test -run '^$' -bench FastPathCost -benchtime 500x -v ./redislock/
func BenchmarkFastPathCost(b *testing.B) {
	ctx := context.Background()
	srv := startRedis(b)
	c := newClient(b, srv.Addr)
	bk := mustNew(b, c)
	b.Cleanup(func() { bk.Close() })
	if err := redislock.LoadScripts(ctx, c); err != nil {
		b.Fatal(err)
	}
	load := func(steps []fastPathStep, own string) []string {
		hashes := make([]string, len(steps))
		for i, s := range steps {
			if s.body == "" {
				hashes[i] = own
				continue
			}
			h, err := c.ScriptLoad(ctx, s.body).Result()
			if err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
			hashes[i] = h
		}
		return hashes
	}
	acqHashes := load(acquireSteps, redislock.AcquireHash())
	relHashes := load(releaseSteps, redislock.ReleaseHash())
	for _, s := range []*redis.Script{tokenGrant, compareDel} {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	const batch = 100
	ttl := 10 * time.Second
	// usec runs queue's commands in one pipeline and returns the server
	// time of the commands named, in µs, and the calls of the first name.
	usec := func(queue func(pipe redis.Pipeliner), names ...string) (int64, int64) {
		resetStats(b, c)
		pipe := c.Pipeline()
		queue(pipe)
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		s := sumStats(commandStats(b, c), names...)
		return s.usec, commandStats(b, c)[names[0]].calls
	}
	type total struct{ usec, calls int64 }
	acq := make([]total, len(acquireSteps))
	rel := make([]total, len(releaseSteps))
	var floor, tokenFloor total
	evalsha := func(pipe redis.Pipeliner, hash string, args []any) {
		pipe.Process(ctx, redis.NewCmd(ctx, append([]any{"evalsha", hash}, args...)...))
	}
	round := 0
	for b.Loop() {
		round++
		if err := c.FlushDB(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		// The steps take turns in a rotating order.
		for j := range acquireSteps {
			i := (j + round) % len(acquireSteps)
			u, n := usec(func(pipe redis.Pipeliner) {
				for k := range batch {
					a, _ := redislock.CycleArgs(bk, fmt.Sprintf("fp/%d/a%d/%d", round, i, k), ttl)
					evalsha(pipe, acqHashes[i], a)
				}
			}, "evalsha")
			acq[i].usec += u
			acq[i].calls += n
		}
		// The releases, each step's of grants of its own, made
		// beforehand by acquire.lua (a step that renames releases them).
		rels := make([][][]any, len(releaseSteps))
		pipe := c.Pipeline()
		for i := range releaseSteps {
			rels[i] = make([][]any, batch)
			for k := range batch {
				a, r := redislock.CycleArgs(bk, fmt.Sprintf("fp/%d/r%d/%d", round, i, k), ttl)
				evalsha(pipe, redislock.AcquireHash(), a)
				rels[i][k] = r
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		for j := range releaseSteps {
			i := (j + round) % len(releaseSteps)
			u, n := usec(func(pipe redis.Pipeliner) {
				for _, r := range rels[i] {
					evalsha(pipe, relHashes[i], r)
				}
			}, "evalsha")
			rel[i].usec += u
			rel[i].calls += n
		}
		u, n := usec(func(pipe redis.Pipeliner) {
			for k := range batch {
				key := fmt.Sprintf("fp/%d/f/%d", round, k)
				pipe.SetNX(ctx, key, "owner", ttl)
				compareDel.EvalSha(ctx, pipe, []string{key}, "owner")
			}
		}, "set", "evalsha")
		floor.usec += u
		floor.calls += n
		u, n = usec(func(pipe redis.Pipeliner) {
			for k := range batch {
				key := fmt.Sprintf("fp/%d/t/%d", round, k)
				tokenGrant.EvalSha(ctx, pipe, []string{key, key + ":token"}, "owner", ttl.Milliseconds())
				compareDel.EvalSha(ctx, pipe, []string{key}, "owner")
			}
		}, "evalsha")
		tokenFloor.usec += u
		tokenFloor.calls += n / 2
	}
	per := func(t total) float64 { return float64(t.usec) / float64(max(t.calls, 1)) }
	var sb strings.Builder
	table := func(title string, steps []fastPathStep, ts []total) {
		fmt.Fprintf(&sb, "\n%s\n", title)
		prev := 0.0
		for i, s := range steps {
			fmt.Fprintf(&sb, "  %6.2f µs  %+6.2f µs  %s\n", per(ts[i]), per(ts[i])-prev, s.name)
			prev = per(ts[i])
		}
	}
	table("try (acquire.lua), server µs per call, and the part each step adds:", acquireSteps, acq)
	table("release (release.lua):", releaseSteps, rel)
	cycle := per(acq[len(acq)-1]) + per(rel[len(rel)-1])
	fmt.Fprintf(&sb, "\ncycle %.2f µs; token floor (INCR + SET NX PX, compare-and-delete) %.2f µs; floor (SET NX PX, compare-and-delete) %.2f µs\n",
		cycle, per(tokenFloor), per(floor))
	b.Log(sb.String())
	b.ReportMetric(cycle, "cycle-µs")
	b.ReportMetric(per(tokenFloor), "token-floor-µs")
	b.ReportMetric(per(floor), "floor-µs")
	b.ReportMetric(0, "ns/op")
}
