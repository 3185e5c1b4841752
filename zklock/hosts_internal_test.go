package zklock

import (
	"testing"
	"time"
)

// The servers are tried at once when a connection drops, the last one
// included, and again when a try fails; the zk client pauses only when
// max(quickTries, servers) tries began within the last pause. The zk
// client's own provider paused before the first try after a connection to
// a single server.
func TestHostsPause(t *testing.T) {
	for _, servers := range [][]string{
		{"127.0.0.1:2181"},
		{"127.0.0.1:2181", "127.0.0.2:2181", "127.0.0.3:2181", "127.0.0.4:2181", "127.0.0.5:2181"},
	} {
		m := max(quickTries, len(servers))
		clock := time.Unix(1e9, 0)
		h := newHosts(func() time.Time { return clock })
		if err := h.Init(servers); err != nil {
			t.Fatal(err)
		}
		next := func(what string, want bool) {
			t.Helper()
			if _, pause := h.Next(); pause != want {
				t.Errorf("%d servers, %s: pause %v, want %v", len(servers), what, pause, want)
			}
		}
		// Servers that are down: m tries, then a pause before each.
		for range m {
			next("a first try", false)
		}
		next("a try too many", true)
		next("a try too many", true)
		// After the pause, m tries again.
		clock = clock.Add(reconnectPause)
		h.Connected()
		// A connection that lasted a minute drops, and the next is cut
		// in its handshake twice: no pause, as the servers are tried
		// again, the last one included, while the next tries pause.
		clock = clock.Add(time.Minute)
		start := clock
		for i := range m {
			clock = start.Add(time.Duration(i) * reconnectPause / time.Duration(2*m))
			next("a reconnection", false)
		}
		next("a reconnection too many", true)
		// A pause after the first of those, the next try is at once.
		clock = start.Add(reconnectPause)
		next("a try a pause later", false)
		next("the next try", true)
	}
}
