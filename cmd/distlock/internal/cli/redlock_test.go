//go:build linux

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
)

// redlockNodes starts n redis-servers and returns them with the
// redlock:// URL of all of them, with options.
func redlockNodes(t *testing.T, n int, options string) ([]*testserver.Redis, string) {
	t.Helper()
	var srvs []*testserver.Redis
	var hosts []string
	for range n {
		s := testserver.StartRedis(t)
		srvs = append(srvs, s)
		hosts = append(hosts, s.Addr)
	}
	u := "redlock://" + strings.Join(hosts, ",")
	if options != "" {
		u += "?" + options
	}
	return srvs, u
}

// seedMarkerOf reads a redlock node's seed marker.
func seedMarkerOf(s *testserver.Redis) string {
	v, _ := s.Do("GET", redlock.DefaultPrefix+"node:seed")
	m, _ := v.(string)
	return m
}

// A Redlock deployment used only through `distlock run`, whose processes
// each live a fraction of a second, gets back the redundancy that nodes
// restarted empty took away: a node restarted empty votes again once its
// wait is over, and so do two nodes restarted one after the other (the
// second once the first's counters were copied, while it still waits).
// Then the node that was never restarted can go down and runs go on.
// Tokens increase across every run.
func TestRedlockRunsRecoverRestartedNodes(t *testing.T) {
	e := newEnv(t)
	const maxTTL = 4 * time.Second
	srvs, backend := redlockNodes(t, 3, fmt.Sprintf("max_ttl=%v&request_timeout=1s", maxTTL))
	var last, runs int
	// try is one run; while two of the three nodes wait, too few vote
	// and it exits 69 (when unavailable is set).
	try := func(unavailable bool) {
		t.Helper()
		r := e.run("--backend", backend, "run", "--no-wait", "--ttl", maxTTL.String(), "jobs/k", "--", "sh", "-c", "echo $DISTLOCK_TOKEN")
		runs++
		if unavailable && r.code == cli.ExitUnavailable {
			return
		}
		if r.code != 0 {
			t.Fatalf("run %d: exit %d, stderr %q", runs, r.code, r.stderr)
		}
		var tok int
		fmt.Sscan(strings.TrimSpace(r.stdout), &tok)
		if tok <= last {
			t.Fatalf("run %d: token %d, not above %d", runs, tok, last)
		}
		last = tok
	}
	run := func() { t.Helper(); try(false) }
	runUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after a minute and %d runs (markers %q, %q, %q)", what, runs, seedMarkerOf(srvs[0]), seedMarkerOf(srvs[1]), seedMarkerOf(srvs[2]))
			}
			try(true)
		}
	}
	run()
	srvs[0].Kill()
	srvs[0].Restart(t)
	runUntil("node 0 copied", func() bool { return strings.HasPrefix(seedMarkerOf(srvs[0]), "c:") })
	srvs[1].Kill()
	srvs[1].Restart(t)
	for _, i := range []int{0, 1} {
		runUntil(fmt.Sprintf("node %d votes again", i), func() bool { return seedMarkerOf(srvs[i]) == "ok" })
	}
	before := runs
	srvs[2].Kill()
	run()
	t.Logf("%d runs until the restarted nodes voted again; then token %d from them alone", before, last)
}

// A paused node (SIGSTOP: connections open, nothing answered) costs run
// and status nothing but its answer: opening the backend and listing need
// a majority, not every node. With a majority paused, --timeout bounds the
// open: run gives up when that bound ends, not the backend's own (5s),
// and exits 69 saying so. Nothing here is timed: the paused nodes are
// resumed only when the test ends, so every command finished while they
// were paused, and the outcomes say which bound ended the open.
func TestRedlockPausedNodeBoundedByTimeout(t *testing.T) {
	e := newEnv(t)
	srvs, backend := redlockNodes(t, 3, "")
	// Released and closed after the nodes are resumed (cleanups run last
	// first), so that the release does not wait for paused nodes.
	ctx := context.Background()
	holder, err := redlock.OpenURL(ctx, backend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	l, err := holder.Acquire(ctx, "paused/held", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(ctx) })
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srvs[2].Resume() })
	// --ttl 3s: each request gives the paused node 300ms.
	if r := e.run("--backend", backend, "run", "--timeout", "1s", "--ttl", "3s", "k", "--", "true"); r.code != 0 {
		t.Errorf("run --timeout 1s with one node paused: exit %d, want 0; stderr %q", r.code, r.stderr)
	}
	r := e.run("--backend", backend, "status", "--json", "paused/")
	var hs []struct {
		Key   string
		Token uint64 `json:",string"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &hs); r.code != 0 || err != nil || len(hs) != 1 || hs[0].Key != "paused/held" || hs[0].Token != l.Token() {
		t.Errorf("status with one node paused: exit %d, stdout %q (%v), want 0 listing paused/held with token %d; stderr %q", r.code, r.stdout, err, l.Token(), r.stderr)
	}
	if err := srvs[1].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srvs[1].Resume() })
	r = e.run("--backend", backend, "run", "--timeout", "1s", "k", "--", "true")
	if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "did not answer within --timeout 1s") {
		t.Errorf("run --timeout 1s with two nodes paused: exit %d, stderr %q; want %d, the open given up at --timeout", r.code, r.stderr, cli.ExitUnavailable)
	}
}
