package torture_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/torture"
)

var (
	soakDuration = flag.Duration("soak.duration", 0, "hold the soak's locks this long on Redis and etcd at once (0: only the short soak on Redis; the full soak is 30m)")
	soakLocks    = flag.Int("soak.locks", 10000, "locks held by the soak's Client on each backend")
	soakTTL      = flag.Duration("soak.ttl", 10*time.Second, "TTL of the soak's locks (renewed every TTL/3)")
	soakInterval = flag.Duration("soak.interval", 0, "time between the soak's samples (default: 1m, or 10s for a soak under 10m)")
	soakWarmup   = flag.Duration("soak.warmup", 0, "samples left out of the soak's trends (default: a sixth of the soak, at least one interval)")
	soakReport   = flag.String("soak.report", "SOAK.md", "where the full soak writes its tables (empty: nowhere)")
)

// TestSoakShort is CI's soak: 1,000 locks held for 20s on Redis. It checks
// only what cannot flake: with a TTL of 10s (a renewal every 3.3s, with 5s
// timeouts) no renewal fails and no lock is lost, every lock is renewed,
// and no goroutine started during the soak still runs once its locks
// are released and its Client and backend closed. The
// trends need the full soak (TestSoak).
func TestSoakShort(t *testing.T) {
	if *soakDuration > 0 {
		t.Skip("the full soak runs in TestSoak")
	}
	target := startTarget(t, "redis")
	leaks := soakLeaks(t)
	const locks = 1000
	rs, err := torture.Soak(context.Background(), torture.SoakConfig{
		Targets: []torture.Target{target}, Locks: locks, TTL: 10 * time.Second,
		Duration: 20 * time.Second, Interval: 5 * time.Second, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := rs[0]
	checkSoak(t, res)
	if res.RenewalsOK < locks {
		t.Errorf("%d renewals confirmed in %v: want at least one per lock (%d)", res.RenewalsOK, res.Duration, locks)
	}
	leaks()
}

// TestSoak is the full soak (-soak.duration=30m): -soak.locks locks held on
// Redis and on etcd at once, each by a Client of its own, sampled every
// -soak.interval, with the tables written to -soak.report. It fails on a
// failed renewal, a lost lock, a trend that grows, or goroutines left
// after the soaks.
func TestSoak(t *testing.T) {
	if *soakDuration <= 0 {
		t.Skip("the full soak runs with -soak.duration (30m)")
	}
	interval := *soakInterval
	if interval <= 0 {
		interval = time.Minute
		if *soakDuration < 10*time.Minute {
			interval = 10 * time.Second
		}
	}
	warmup := *soakWarmup
	if warmup <= 0 {
		warmup = max(interval, (*soakDuration / 6).Truncate(interval))
	}
	leaks := soakLeaks(t)
	var rs []*torture.SoakResult
	t.Run("redis+etcd", func(t *testing.T) {
		targets := []torture.Target{startTarget(t, "redis"), startTarget(t, "etcd")}
		var err error
		rs, err = torture.Soak(context.Background(), torture.SoakConfig{
			Targets: targets, Locks: *soakLocks, TTL: *soakTTL,
			Duration: *soakDuration, Interval: interval, Warmup: warmup, Logf: t.Logf,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range rs {
			checkSoak(t, res)
			for _, tr := range res.Trends() {
				t.Logf("%s: %s: mean %.2f, slope %+.4f/min, relative %+.2f%%, monotone %v: %s", res.Kind, tr.Metric, tr.Mean, tr.Slope, tr.Rel*100, tr.Monotone, tr.Verdict)
				if tr.Verdict == "grows" {
					t.Errorf("%s: %s grows: %+.4f per minute, %+.2f%% of its mean over the soak (monotone %v)", res.Kind, tr.Metric, tr.Slope, tr.Rel*100, tr.Monotone)
				}
			}
		}
	})
	if *soakReport != "" && len(rs) > 0 {
		cmd := fmt.Sprintf("go test -run 'TestSoak$' -timeout 0 -soak.duration=%v -soak.locks=%d -soak.ttl=%v .", *soakDuration, *soakLocks, *soakTTL)
		if err := torture.WriteSoak(*soakReport, rs, cmd); err != nil {
			t.Fatal(err)
		}
	}
	leaks()
}

// checkSoak fails t on a failed renewal or a lost lock.
func checkSoak(t *testing.T, res *torture.SoakResult) {
	t.Helper()
	t.Logf("%s: %d locks acquired in %v; renewals %d ok, %d failed; %d lost; %d at risk", res.Kind, res.Locks, res.Acquiring, res.RenewalsOK, res.RenewalsFailed, res.Lost, res.AtRisk)
	for _, f := range res.Failures {
		t.Log("  " + f)
	}
	if res.RenewalsFailed > 0 {
		t.Errorf("%d renewals failed", res.RenewalsFailed)
	}
	if res.Lost > 0 {
		t.Errorf("%d locks lost", res.Lost)
	}
	for _, s := range res.Samples {
		if s.Held != res.Locks {
			t.Errorf("at %v, %d of %d locks held", s.At, s.Held, res.Locks)
		}
	}
}

// soakLeaks returns a check that no goroutine started since the call is
// still running: it retries for about a minute (a closed connection's
// goroutines take a moment to end on a loaded machine), then fails t
// with the stacks of those left.
func soakLeaks(t *testing.T) func() {
	ignore := goleak.IgnoreCurrent()
	return func() {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			err := goleak.Find(ignore) // retries for a second or two itself
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left after the soak: %v", err)
				return
			}
		}
	}
}
