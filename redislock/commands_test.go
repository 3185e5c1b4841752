package redislock_test

import (
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
