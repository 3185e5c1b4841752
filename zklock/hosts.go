package zklock

import (
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// reconnectPause is how long the zk client pauses when its HostProvider
// says so (a constant of the zk client).
const reconnectPause = time.Second

// quickTries is how many tries without a pause hosts allows within
// reconnectPause, or the number of servers if greater.
const quickTries = 3

// hosts is the zk client's HostProvider: the zk client's own, for the
// servers and their order, with pauses of its own. The zk client's own
// provider pauses before it tries again the server it was last connected
// to, so that with a single server every reconnection waited a second:
// two dropped connections in a row took 2 of the 2.08 s that a session
// of 5 s confirms, and leases were lost to blips that ZooKeeper's session
// outlived. hosts pauses only when the last quickTries tries (or as many
// as there are servers, if more) all began within reconnectPause: the
// servers are tried at once after a connection drops, the last one
// included, and again if a handshake is cut, while servers that are down,
// or drop every connection right after the handshake, are not tried in
// a busy loop.
type hosts struct {
	*zk.DNSHostProvider
	now func() time.Time

	mu    sync.Mutex
	tries []time.Time // when the last tries without a pause began, oldest first
}

var _ zk.HostProvider = (*hosts)(nil)

func newHosts(now func() time.Time) *hosts {
	return &hosts{DNSHostProvider: zk.NewDNSHostProvider(), now: now}
}

// Next returns the next server to try, and whether the zk client should
// pause first.
func (h *hosts) Next() (server string, pause bool) {
	server, _ = h.DNSHostProvider.Next()
	m := max(quickTries, h.DNSHostProvider.Len())
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if len(h.tries) == m {
		if now.Sub(h.tries[0]) < reconnectPause {
			return server, true
		}
		h.tries = h.tries[1:]
	}
	h.tries = append(h.tries, now)
	return server, false
}
