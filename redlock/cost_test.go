package redlock_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// cycleBudget is the most server commands one node may run for an
// uncontended acquire and release, scripts and the commands they call
// counted alike (INFO commandstats counts both): EVALSHA, MGET, TIME,
// INCR and SET to vote; EVALSHA, MGET, DEL and SET (the tombstone) to
// release (PUBLISH only while a waiter flagged the key). Every command is
// paid on every node of every cycle.
const cycleBudget = 9

// TestCommandsPerCycle counts the commands each node runs for one
// uncontended acquire and release, so that a script that grows a command
// is noticed.
func TestCommandsPerCycle(t *testing.T) {
	srvs := startNodes(t, 3)
	b := newBackend(t, addrs(srvs))
	ctx := testCtx(t)
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Owner: "cost"}
	cycle := func() {
		t.Helper()
		l, err := b.Acquire(ctx, "cost", opts)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		// A try and a release return once a majority decided them; the
		// last node's requests may still be on their way, the release's
		// after the vote it undoes. The cycle is over once every node
		// released the key.
		eventually(t, 10*time.Second, "every node released the key", func() bool {
			for _, s := range srvs {
				if typ, err := s.Do("TYPE", b.KeyPath("cost")); err != nil || typ != "none" {
					return false
				}
			}
			return true
		})
	}
	// The first cycle marks the new deployment's nodes and loads the
	// scripts; it is not the steady state.
	cycle()
	for _, s := range srvs {
		if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
	}
	cycle()
	for i, s := range srvs {
		calls, usec := commandCalls(t, s)
		t.Logf("node %d: %s (%dµs of server time)", i+1, formatCalls(calls), usec)
		total := 0
		for _, c := range calls {
			total += c
		}
		if total > cycleBudget {
			t.Errorf("node %d ran %d commands for one uncontended cycle, want at most %d: %s", i+1, total, cycleBudget, formatCalls(calls))
		}
		if calls["evalsha"] != 2 {
			t.Errorf("node %d: %d EVALSHA for one cycle, want 2 (one vote, one release): %s", i+1, calls["evalsha"], formatCalls(calls))
		}
	}
}

// commandCalls reads the calls of every command from INFO commandstats,
// leaving out CONFIG, INFO and TYPE (the test's own), and the server time of
// the scripts (which includes that of the commands they call).
func commandCalls(t *testing.T, s *testserver.Redis) (calls map[string]int, usec int) {
	t.Helper()
	v, err := s.Do("INFO", "commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	text, ok := v.(string)
	if !ok {
		t.Fatalf("INFO commandstats: reply %T", v)
	}
	calls = map[string]int{}
	for line := range strings.SplitSeq(text, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || strings.HasPrefix(name, "config") || name == "info" || name == "type" {
			continue
		}
		fields := strings.Split(rest, ",")
		n, err := strconv.Atoi(strings.TrimPrefix(fields[0], "calls="))
		if err != nil {
			t.Fatalf("INFO commandstats: line %q", line)
		}
		calls[name] = n
		if name == "evalsha" && len(fields) > 1 {
			u, _ := strconv.Atoi(strings.TrimPrefix(fields[1], "usec="))
			usec += u
		}
	}
	return calls, usec
}

func formatCalls(calls map[string]int) string {
	var parts []string
	for name, n := range calls {
		parts = append(parts, fmt.Sprintf("%s=%d", name, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
