package zklock_test

import (
	"net"
	"sync"
	"testing"
)

// wireProxy forwards every connection a client makes through it to a
// ZooKeeper server, each direction through a function its user gives (to
// read, count, hold back or reorder the frames), and closes both ends when
// either direction ends.
type wireProxy struct {
	ln     net.Listener
	target string
	pair   func(c, s net.Conn) (up, down func()) // client to server, server to client
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// startWireProxy starts a wireProxy to target, closed with the test. pair
// is called once per connection, with the client's end and the server's.
func startWireProxy(t testing.TB, target string, pair func(c, s net.Conn) (up, down func())) *wireProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &wireProxy{ln: ln, target: target, pair: pair}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *wireProxy) addr() string { return p.ln.Addr().String() }

func (p *wireProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		up, down := p.pair(c, s)
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			up()
			s.Close()
		}()
		go func() {
			defer p.wg.Done()
			down()
			c.Close()
		}()
	}
}

func (p *wireProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
