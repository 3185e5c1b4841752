package zklock

import (
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// reconnectPause is how long the zk client pauses when its HostProvider
// says so (a constant of the zk client).
const reconnectPause = time.Second

// quickTries is how many tries hosts allows within reconnectPause, or
// the number of servers if greater.
const quickTries = 3

// hosts is the zk client's HostProvider: the zk client's own, for the
// servers and their order, with pauses of its own. At a pause the zk
// client fails the requests it has not sent with zk.ErrNoServer, notices
// Close, and sleeps reconnectPause. Its own provider pauses before it tries
// again the server it was last connected to, so that with a single server
// every reconnection waited a second: two dropped connections in a row
// took 2 of the 2.08 s that a session of 5 s confirms, and leases were
// lost to blips that ZooKeeper's session outlived. hosts tries every
// server at once when a connection drops, the last one included, and
// pauses once a round of them failed, a round being every server or two
// tries, whichever is more (so that a single server is tried again at
// once when a reconnection was cut in its handshake), and whenever
// quickTries tries (or one per server, if more) began within the last
// reconnectPause, so that a server that drops every connection right
// after its handshake is not tried in a busy loop.
type hosts struct {
	*zk.DNSHostProvider
	now func() time.Time

	mu     sync.Mutex
	round  int         // tries since the last connection or pause
	recent []time.Time // when the last tries begin (after their pause), oldest first
}

var _ zk.HostProvider = (*hosts)(nil)

func newHosts(now func() time.Time) *hosts {
	return &hosts{DNSHostProvider: zk.NewDNSHostProvider(), now: now}
}

// Next returns the next server to try, and whether the zk client should
// pause first.
func (h *hosts) Next() (server string, pause bool) {
	server, _ = h.DNSHostProvider.Next()
	n := h.DNSHostProvider.Len()
	h.mu.Lock()
	defer h.mu.Unlock()
	m := max(quickTries, n)
	begins := h.now()
	if h.round >= max(n, 2) || (len(h.recent) == m && begins.Sub(h.recent[0]) < reconnectPause) {
		pause = true
		h.round = 0
		begins = begins.Add(reconnectPause)
	}
	h.round++
	if len(h.recent) == m {
		h.recent = h.recent[1:]
	}
	h.recent = append(h.recent, begins)
	return server, pause
}

// Connected is told of each connection made (its handshake answered).
func (h *hosts) Connected() {
	h.DNSHostProvider.Connected()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.round = 0
}
