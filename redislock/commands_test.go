package redislock_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// The server commands of an uncontended acquire and release, those that
// the scripts run included, counted with INFO commandstats: the floor's SET
// NX PX and compare-and-DEL execute four (SET, EVALSHA, GET, DEL); a cycle
// with a fencing token needs its INCR on top, and the acquire's GET of the
// last release (a late copy of a released grant's request must not take
// the key again). Queue bookkeeping, the server's clock and a tombstone
// key of its own are not paid when nobody waits.
func TestUncontendedServerCommands(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	want := map[string]int64{"evalsha": 2, "exists": 1, "incr": 1, "set": 1, "get": 2, "rename": 1}
	for _, mode := range []struct {
		name string
		opts []redislock.Option
		wait bool
	}{
		{"Try", nil, false},
		{"Wait", nil, true},
		{"UnorderedWait", []redislock.Option{redislock.WithUnordered()}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			b := newBackend(t, srv.Addr, mode.opts...)
			key := "commands/" + mode.name
			cycle := func() {
				t.Helper()
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: mode.wait})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cycle() // loads the scripts, checks the eviction policy
			const cycles = 50
			resetStats(t, admin)
			for range cycles {
				cycle()
			}
			got := map[string]int64{}
			for name, st := range commandStats(t, admin) {
				if name == "info" || strings.HasPrefix(name, "config") {
					continue // the test's own
				}
				got[name] = st.calls
			}
			var total, wantTotal int64
			for name, n := range want {
				wantTotal += n * cycles
				if got[name] != n*cycles {
					t.Errorf("%s: %d calls in %d cycles, want %d per cycle", name, got[name], cycles, n)
				}
			}
			for _, n := range got {
				total += n
			}
			if total != wantTotal {
				t.Errorf("%d server commands in %d cycles, want %d per cycle: %s", total, cycles, wantTotal/cycles, perCycle(got, cycles))
			}
		})
	}
}

func perCycle(m map[string]int64, cycles int64) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(m[name])/float64(cycles)))
	}
	return strings.Join(parts, ", ")
}

// Holder reads a lock key with one script call (peek.lua: a GET and a
// PTTL), and List one such call per key it finds, besides its SCANs: the
// reads run the GET and PTTL they ran before, plus the EVALSHA that runs
// them, in the same round trips.
func TestReadServerCommands(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	b := newBackend(t, srv.Addr)
	l, err := b.Acquire(ctx, "reads/a", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		if h, ok, err := b.Holder(ctx, "reads/a"); err != nil || !ok || h.Token != l.Token() {
			t.Fatalf("Holder: %+v %v %v", h, ok, err)
		}
		if hs, err := b.List(ctx, "reads/"); err != nil || len(hs) != 1 || hs[0].Token != l.Token() {
			t.Fatalf("List: %+v %v", hs, err)
		}
	}
	read() // loads the script
	const reads = 20
	resetStats(t, admin)
	for range reads {
		read()
	}
	st := commandStats(t, admin)
	for name, want := range map[string]int64{"evalsha": 2, "get": 2, "pttl": 2} {
		if got := st[name].calls; got != want*reads {
			t.Errorf("%s: %d calls in %d reads, want %d per read", name, got, reads, want)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The server commands of a FIFO hand-off, those that the scripts run
// included, counted with INFO commandstats: four Backends take turns on
// one key, each asking again as soon as it released, while the lock is
// held by the waiter its release handed it to (issue 29: the common case
// of a contended key). Per hand-off: the release and its hand-off (GET,
// RENAME, TIME, ZRANGEBYSCORE, ZPOPMIN, ZSCORE, ZREM, INCR, PUBLISH,
// EXISTS, SET) and the releaser's try that joins the queue (EXISTS, MGET,
// PTTL, TIME, ZRANGEBYSCORE, ZRANGE, 2 ZADD, PTTL; the queue keys' PEXPIRE
// only now and then), each an EVALSHA: 22. Before issue 29 it was 33.
func TestHandOffServerCommands(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const key, parties, rounds = "commands/hand-off", 4, 24
	const want = 22
	// No waiter refreshes its place during the test.
	opts := []redislock.Option{redislock.WithWaiterLiveness(time.Hour)}
	bs := make([]*redislock.Backend, parties)
	for i := range bs {
		bs[i] = newBackend(t, srv.Addr, opts...)
	}
	acq := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	warm, err := bs[0].Acquire(ctx, key+"/warm-up", acq) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// leases[i] receives party i's grant. The waiters left at the end
	// give up (waitCtx).
	leases := make([]chan driver.Lease, parties)
	waitCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	ask := func(i int) {
		go func() {
			l, err := bs[i].Acquire(waitCtx, key, acq)
			if err != nil && waitCtx.Err() == nil {
				t.Error(err)
			}
			leases[i] <- l
		}()
	}
	var polls int64
	queued := func(n int64) {
		t.Helper()
		eventually(t, 30*time.Second, fmt.Sprintf("%d waiters queued", n), func() bool {
			polls++
			return admin.ZCard(ctx, queueKey(key)).Val() == n
		})
	}
	for i := range leases {
		leases[i] = make(chan driver.Lease, 1)
		ask(i)
		if i == 0 {
			if l := <-leases[0]; l == nil {
				t.FailNow()
			} else {
				leases[0] <- l
			}
		} else {
			queued(int64(i))
		}
	}
	// Each party's first try has subscribed to its wake channel: what
	// follows is the steady state.
	holder := 0
	l := <-leases[holder]
	cycle := func() {
		t.Helper()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next := (holder + 1) % parties
		if l = <-leases[next]; l == nil {
			t.FailNow()
		}
		ask(holder)
		queued(parties - 1)
		holder = next
	}
	cycle()
	resetStats(t, admin)
	polls = 0
	for range rounds {
		cycle()
	}
	got := map[string]int64{}
	for name, st := range commandStats(t, admin) {
		if name == "info" || strings.HasPrefix(name, "config") {
			continue // the test's own
		}
		got[name] = st.calls
	}
	if got["zcard"] != polls {
		t.Fatalf("%d ZCARD, the test polled %d times", got["zcard"], polls)
	}
	delete(got, "zcard")
	var total int64
	for _, n := range got {
		total += n
	}
	if total > want*rounds {
		t.Errorf("%d server commands in %d hand-offs, want at most %d per hand-off: %s", total, rounds, want, perCycle(got, rounds))
	}
	t.Logf("per hand-off: %s", perCycle(got, rounds))
	// The other parties give up (or are handed the lock, and let it go).
	giveUp()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range parties {
		if i == holder {
			continue
		}
		if l := <-leases[i]; l != nil {
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}
	}
}
