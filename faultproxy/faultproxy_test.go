package faultproxy_test

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server that records what it received.
func echo(t *testing.T) (addr string, got chan string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- strings.TrimSpace(line)
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), got
}

func dial(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return strings.TrimSpace(line), err
}

func TestForwardBlackholeHeal(t *testing.T) {
	addr, got := echo(t)
	p := faultproxy.Start(t, addr)
	c, r := dial(t, p)
	if s, err := roundTrip(t, c, r, "one", 5*time.Second); err != nil || s != "one" {
		t.Fatalf("pass: %q, %v", s, err)
	}
	<-got
	p.Blackhole()
	if _, err := roundTrip(t, c, r, "two", 200*time.Millisecond); err == nil {
		t.Fatal("reply came through a blackhole")
	}
	select {
	case s := <-got:
		t.Fatalf("server received %q through a blackhole", s)
	default:
	}
	p.Heal()
	// What was held back arrives after the heal.
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "two" {
		t.Fatalf("after heal: %q, %v", line, err)
	}
}

func TestDropReplies(t *testing.T) {
	addr, got := echo(t)
	p := faultproxy.Start(t, addr)
	c, r := dial(t, p)
	p.DropReplies()
	if _, err := roundTrip(t, c, r, "lost", 5*time.Second); err == nil {
		t.Fatal("reply was not dropped")
	}
	select {
	case s := <-got:
		if s != "lost" {
			t.Fatalf("server got %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the server")
	}
	p.Heal()
	c2, r2 := dial(t, p)
	if s, err := roundTrip(t, c2, r2, "again", 5*time.Second); err != nil || s != "again" {
		t.Fatalf("after heal: %q, %v", s, err)
	}
}

// StallReplies lets requests reach the target and holds its replies back
// until Heal, on connections open before and after; Forwarded counts the
// bytes delivered each way.
func TestStallReplies(t *testing.T) {
	addr, got := echo(t)
	p := faultproxy.Start(t, addr)
	type conn struct {
		c net.Conn
		r *bufio.Reader
	}
	var conns []conn
	c, r := dial(t, p)
	conns = append(conns, conn{c, r})
	if s, err := roundTrip(t, c, r, "before", 5*time.Second); err != nil || s != "before" {
		t.Fatalf("before the stall: %q, %v", s, err)
	}
	<-got
	if sent, replied := p.Forwarded(); sent != 7 || replied != 7 {
		t.Fatalf("Forwarded = %d, %d after one round trip of 7 bytes; want 7, 7", sent, replied)
	}
	p.StallReplies()
	c, r = dial(t, p)
	conns = append(conns, conn{c, r})
	for i, cn := range conns {
		if s, err := roundTrip(t, cn.c, cn.r, "held", 200*time.Millisecond); err == nil {
			t.Fatalf("connection %d: reply %q came through a stall", i, s)
		}
		select {
		case s := <-got:
			if s != "held" {
				t.Fatalf("connection %d: server got %q", i, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %d: the request did not reach the server", i)
		}
	}
	if sent, replied := p.Forwarded(); sent != 7+2*5 || replied != 7 {
		t.Fatalf("Forwarded = %d, %d during the stall; want %d, 7", sent, replied, 7+2*5)
	}
	p.Heal()
	for i, cn := range conns {
		cn.c.SetDeadline(time.Now().Add(5 * time.Second))
		if line, err := cn.r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "held" {
			t.Fatalf("connection %d after heal: %q, %v", i, line, err)
		}
	}
}

func TestDelayAndReset(t *testing.T) {
	addr, _ := echo(t)
	p := faultproxy.Start(t, addr)
	c, r := dial(t, p)
	p.Delay(100 * time.Millisecond)
	start := time.Now()
	if s, err := roundTrip(t, c, r, "slow", 5*time.Second); err != nil || s != "slow" {
		t.Fatalf("delay: %q, %v", s, err)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("round trip took %v through a 100ms delay each way", el)
	}
	p.Reset()
	if _, err := roundTrip(t, c, r, "x", 5*time.Second); err == nil {
		t.Fatal("connection survived Reset")
	}
}

// TestBlackholeFrom cuts the connections of one origin and not those of
// another through the same proxy, new ones included, and delivers what
// was held back once healed. A connection open before SetOrigin is named
// too.
func TestBlackholeFrom(t *testing.T) {
	addr, _ := echo(t)
	p := faultproxy.Start(t, addr)
	// The origin of a connection is the name its client dialed with,
	// which the test records by the client's address once dialed: the
	// proxy waits for it.
	var mu sync.Mutex
	named := sync.NewCond(&mu)
	names := map[string]string{}
	dialAs := func(name string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		mu.Lock()
		names[c.LocalAddr().String()] = name
		named.Broadcast()
		mu.Unlock()
		return c, bufio.NewReader(c)
	}
	early, rEarly := dialAs("early")
	if s, err := roundTrip(t, early, rEarly, "hello", 5*time.Second); err != nil || s != "hello" {
		t.Fatalf("pass: %q, %v", s, err)
	}
	p.SetOrigin(func(c net.Conn) string {
		mu.Lock()
		defer mu.Unlock()
		for names[c.RemoteAddr().String()] == "" {
			named.Wait()
		}
		return names[c.RemoteAddr().String()]
	})
	a, ra := dialAs("a")
	b, rb := dialAs("b")
	for _, c := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{a, ra}, {b, rb}} {
		if s, err := roundTrip(t, c.c, c.r, "hello", 5*time.Second); err != nil || s != "hello" {
			t.Fatalf("pass: %q, %v", s, err)
		}
	}
	p.BlackholeFrom("a")
	p.BlackholeFrom("early")
	for _, c := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{a, ra}, {early, rEarly}} {
		if _, err := roundTrip(t, c.c, c.r, "held", 200*time.Millisecond); err == nil {
			t.Fatal("a reply came through while its origin was cut")
		}
	}
	a2, ra2 := dialAs("a")
	if _, err := roundTrip(t, a2, ra2, "new", 200*time.Millisecond); err == nil {
		t.Fatal("a new connection of a's passed while a was cut")
	}
	if s, err := roundTrip(t, b, rb, "b passes", 5*time.Second); err != nil || s != "b passes" {
		t.Fatalf("b while a is cut: %q, %v", s, err)
	}
	if got := p.Origins(); got["a"] != 2 || got["b"] != 1 || got["early"] != 1 || len(got) != 3 {
		t.Fatalf("Origins() = %v, want a:2 b:1 early:1", got)
	}
	p.HealFrom("a")
	p.HealFrom("early")
	for _, c := range []struct {
		r    *bufio.Reader
		c    net.Conn
		want string
	}{{ra, a, "held"}, {ra2, a2, "new"}, {rEarly, early, "held"}} {
		c.c.SetDeadline(time.Now().Add(5 * time.Second))
		if line, err := c.r.ReadString('\n'); err != nil || strings.TrimSpace(line) != c.want {
			t.Fatalf("after HealFrom: %q, %v; want %q", line, err, c.want)
		}
	}
}
