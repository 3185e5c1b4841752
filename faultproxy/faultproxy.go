package faultproxy

import (
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards connections accepted on Addr to a target address. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	mode      mode
	delay     time.Duration
	changed   chan struct{} // closed and replaced on every change of a link's mode (set, setFrom, name)
	links     map[*link]struct{}
	conns     int // connections accepted and linked to the target
	closed    bool
	origin    func(net.Conn) string // names each connection's origin; nil: none
	originGen int                   // changes of origin
	cutFrom   map[string]bool       // origins blackholed (BlackholeFrom)
	wg        sync.WaitGroup

	sent, replied atomic.Int64 // bytes forwarded (see Forwarded)
}

type mode int

const (
	pass mode = iota
	blackhole
	dropReplies
	stallReplies
)

type link struct {
	client, server net.Conn
	origin         string // see SetOrigin; "" if unknown; guarded by Proxy.mu
	named          int    // the Proxy.originGen origin was named by
	once           sync.Once
	done           chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// Start starts a proxy to target on a free loopback port; it is closed when
// the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// New starts a proxy to target on a free loopback port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), links: map[*link]struct{}{},
		cutFrom: map[string]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops all traffic, in both directions and on new connections,
// without closing anything: like a network partition, the peers see
// silence. Data sent meanwhile is held back (as TCP would retransmit it) and
// delivered after Heal.
func (p *Proxy) Blackhole() { p.set(blackhole, 0) }

// DropReplies lets requests reach the server but loses what the server sends
// back: at its first byte the client's connection is closed, so the client
// sees a network error right after its request took effect.
func (p *Proxy) DropReplies() { p.set(dropReplies, 0) }

// StallReplies holds back what the target sends, on every connection and
// without closing anything, while what the client sends flows: a one-way
// partition. The target's data is delivered after Heal, as Blackhole's.
func (p *Proxy) StallReplies() { p.set(stallReplies, 0) }

// Delay forwards traffic in both directions after d.
func (p *Proxy) Delay(d time.Duration) { p.set(pass, d) }

// Heal restores normal forwarding.
func (p *Proxy) Heal() { p.set(pass, 0) }

// SetOrigin makes f name the origin of each connection of the proxy, so
// that BlackholeFrom can cut the connections of one origin where several
// dial one proxy (the links from one member of a cluster to another). f
// is given the connection the proxy accepted, and returns "" for an
// origin it cannot tell: a connection of no origin is cut only by
// Blackhole. SetOrigin names the current connections before it returns,
// and the proxy names each new one as it accepts it, before it dials the
// target. f must not call the proxy's methods, and must return: Close
// waits for it. BlackholeFrom asks f again for the connections it could
// not name.
func (p *Proxy) SetOrigin(f func(c net.Conn) string) {
	p.mu.Lock()
	p.origin = f
	p.originGen++
	links := slices.Collect(maps.Keys(p.links))
	p.mu.Unlock()
	for _, l := range links {
		p.name(l)
	}
}

// name sets l's origin by the proxy's current origin function, again if
// that changes meanwhile.
func (p *Proxy) name(l *link) {
	p.mu.Lock()
	l.named = -1
	for l.named != p.originGen {
		f, gen := p.origin, p.originGen
		p.mu.Unlock()
		from := ""
		if f != nil {
			from = f(l.client)
		}
		p.mu.Lock()
		l.origin, l.named = from, gen
	}
	// A cut of the origin applies to the link's traffic at once.
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// BlackholeFrom stops all traffic, in both directions, on the connections
// of origin (see SetOrigin), current and new, as Blackhole does on all of
// them, until HealFrom.
func (p *Proxy) BlackholeFrom(origin string) {
	// A connection whose origin was not told (its dialer's socket not yet
	// listed, say) is asked about again, so that it is not left out.
	p.mu.Lock()
	var unnamed []*link
	for l := range p.links {
		if l.origin == "" && p.origin != nil {
			unnamed = append(unnamed, l)
		}
	}
	p.mu.Unlock()
	for _, l := range unnamed {
		p.name(l)
	}
	p.setFrom(origin, true)
}

// HealFrom ends BlackholeFrom(origin); the proxy's mode (Blackhole, Delay,
// DropReplies, StallReplies) still applies to every connection.
func (p *Proxy) HealFrom(origin string) { p.setFrom(origin, false) }

// Origins returns how many connections of each origin (see SetOrigin) the
// proxy has open, "" counting those whose origin was not told.
func (p *Proxy) Origins() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := map[string]int{}
	for l := range p.links {
		n[l.origin]++
	}
	return n
}

// Conns returns how many connections the proxy has accepted and linked to
// the target so far, so that a test can wait for a client to have
// reconnected.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// Forwarded returns how many bytes the proxy has forwarded so far: sent,
// from its clients to the target, and replied, from the target to its
// clients. A test tells by them which way a fault lets data through.
func (p *Proxy) Forwarded() (sent, replied int64) {
	return p.sent.Load(), p.replied.Load()
}

// Reset closes every current connection; new ones are accepted.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) set(m mode, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, d
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) setFrom(origin string, cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cut {
		p.cutFrom[origin] = true
	} else {
		delete(p.cutFrom, origin)
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns the mode for l's traffic: blackhole when l's origin is cut.
func (p *Proxy) state(l *link) (mode, time.Duration, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.origin != "" && p.cutFrom[l.origin] {
		return blackhole, 0, p.changed
	}
	return p.mode, p.delay, p.changed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		// Naming and dialing may take a while: the next connection is
		// not kept waiting behind them.
		go p.link(c)
	}
}

// link names the connection c, dials the target for it, and pumps
// between the two.
func (p *Proxy) link(c net.Conn) {
	defer p.wg.Done()
	l := &link{client: c, done: make(chan struct{})}
	p.name(l)
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	l.server = s
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.conns++
	p.wg.Add(2)
	// Named by an origin function that SetOrigin replaced before the link
	// was among those it names.
	stale := l.named != p.originGen
	p.mu.Unlock()
	if stale {
		p.name(l)
	}
	go p.pump(l, c, s, false)
	go p.pump(l, s, c, true)
}

// pump copies src to dst, obeying the proxy's mode for each chunk.
func (p *Proxy) pump(l *link, src, dst net.Conn, reply bool) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(l, dst, buf[:n], reply) {
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}

// forward writes chunk to dst once the mode allows; false ends the link.
func (p *Proxy) forward(l *link, dst net.Conn, chunk []byte, reply bool) bool {
	for {
		m, d, changed := p.state(l)
		switch {
		case m == blackhole, m == stallReplies && reply:
			select {
			case <-changed:
				continue
			case <-l.done:
				return false
			}
		case m == dropReplies && reply:
			return false
		}
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return false
			}
		}
		// Counted before the write, so that whoever got the bytes finds
		// them counted.
		count := &p.sent
		if reply {
			count = &p.replied
		}
		count.Add(int64(len(chunk)))
		n, err := dst.Write(chunk)
		count.Add(int64(n - len(chunk)))
		return err == nil
	}
}
