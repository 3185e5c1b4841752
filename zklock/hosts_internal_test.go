package zklock

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// hostsTry is a try of hostsRun: connected says whether the try before
// made a connection, took how long it took.
type hostsTry struct {
	connected bool
	took      time.Duration
}

// hostsRun runs tries of h, the zk client's way: before each, connected
// says whether the previous try made a connection, and took is how long
// the previous try took; a pause sleeps reconnectPause. It returns, try by
// try, "P" for a pause and "-" for none.
func hostsRun(t *testing.T, servers int, tries []hostsTry) string {
	t.Helper()
	var addrs []string
	for i := range servers {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d:2181", i+1))
	}
	clock := time.Unix(1e9, 0)
	h := newHosts(func() time.Time { return clock })
	if err := h.Init(addrs); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, try := range tries {
		clock = clock.Add(try.took)
		if try.connected {
			h.Connected()
		}
		if _, pause := h.Next(); pause {
			got.WriteString("P")
			clock = clock.Add(reconnectPause)
		} else {
			got.WriteString("-")
		}
	}
	return got.String()
}

// hostsTries makes n tries, each taking took, the first after a
// connection if connected.
func hostsTries(n int, connected bool, took time.Duration) []hostsTry {
	tries := make([]hostsTry, n)
	for i := range tries {
		tries[i].took = took
	}
	tries[0].connected = connected
	return tries
}

// The zk client pauses (failing the requests it holds, noticing Close)
// once a round of tries failed, a round being every server or two tries,
// whichever is more, and whenever quickTries tries (or one per server)
// began within a pause; a connection that drops is followed at once by a
// try of every server, the last one included. The zk client's own
// provider paused before the first try after a connection to a single
// server.
func TestHostsPause(t *testing.T) {
	minute, instant, slow := time.Minute, time.Duration(0), 2*time.Second
	for _, tc := range []struct {
		name    string
		servers int
		tries   []hostsTry
		want    string
	}{
		// Servers down that refuse at once: a pause after each round,
		// and no more than quickTries tries (or one per server) within
		// a pause.
		{"refused", 1, hostsTries(7, false, instant), "--P-P-P"},
		{"refused", 5, hostsTries(12, false, instant), "-----P----P-"},
		// Servers down whose dials time out: a pause after each round
		// all the same.
		{"timeouts", 1, hostsTries(6, false, slow), "--P-P-"},
		{"timeouts", 5, hostsTries(12, false, slow), "-----P----P-"},
		// A connection that lasted a minute drops: the servers at once,
		// the last one included, and a single server twice (its
		// handshake may have been cut).
		{"a drop", 1, hostsTries(3, true, minute), "--P"},
		{"a drop", 5, hostsTries(6, true, minute), "-----P"},
		// A server that drops each connection right after its
		// handshake: no more than quickTries tries within a pause.
		{"flapping", 1, []hostsTry{{false, 0}, {true, 0}, {true, 0}, {true, 0}, {true, 0}, {true, 0}}, "---P--"},
	} {
		if got := hostsRun(t, tc.servers, tc.tries); got != tc.want {
			t.Errorf("%s, %d servers: pauses %s, want %s", tc.name, tc.servers, got, tc.want)
		}
	}
}
