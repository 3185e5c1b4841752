package zklock

import (
	"encoding/binary"
	"math"
	"net"
	"slices"
	"sync"
	"time"
)

// dial connects to a server for the zk client and reads along the
// connection: the first reply, the connect response, for the session id
// and the session timeout the server granted (the zk client keeps both to
// itself, and every Validity's TTL is counted from the timeout: the
// server may grant less than was asked for); and the replies to creates, for the zxid
// of each of our lock nodes (see created).
func (b *Backend) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	hc := &handshakeConn{Conn: c, b: b, creates: map[int32]struct{}{}}
	hc.out.max, hc.out.f = requestHead, hc.sent
	hc.in.max, hc.in.f = replyHead, hc.received
	return hc, nil
}

// The bytes of a frame's body that the reading along keeps: a request's
// header (xid, opcode) and the path a create request holds, a reply's
// header (xid, zxid, err) and the path a create's reply holds (each a
// length, then the bytes; a longer path is not seen: its listing waits for
// the create's reply, and its node is read, as before).
const (
	requestHead = 8 + 4 + 4096
	replyHead   = 16 + 4 + 4096
)

// ZooKeeper's opcodes of a create (the zk client's Create sends it; its
// container creates use another) and of a sync.
const (
	opCreate = 1
	opSync   = 9
)

// handshakeConn reads along the client's connection to a server. The zk
// client writes from one goroutine at a time and reads from one goroutine
// at a time, so each direction's frames need no lock; the xids of the
// creates in flight, shared by both, do.
type handshakeConn struct {
	net.Conn
	b   *Backend
	out frames // requests: the connect request, then xid, opcode, body
	in  frames // replies: the connect response, then xid, zxid, err, body

	mu      sync.Mutex
	creates map[int32]struct{} // xids of the creates sent, not answered yet
}

func (c *handshakeConn) Write(p []byte) (int, error) {
	// Before the bytes leave: the reply may be read before Write returns.
	c.out.feed(p)
	return c.Conn.Write(p)
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.in.feed(p[:n])
	}
	return n, err
}

// sent looks at one request frame's head.
func (c *handshakeConn) sent(i int, head []byte) {
	if i == 0 || len(head) < 8 {
		return // the connect request has no header
	}
	switch int32(binary.BigEndian.Uint32(head[4:])) {
	case opSync:
		if p, ok := requestPath(head); ok {
			c.b.syncs.sending(p)
		}
	case opCreate:
		c.mu.Lock()
		c.creates[int32(binary.BigEndian.Uint32(head))] = struct{}{}
		c.mu.Unlock()
		if p, ok := requestPath(head); ok {
			c.b.created.sending(p)
		}
	}
}

// requestPath returns the path of a create's or a sync's request frame
// head (the first field of its body), if the head holds all of it.
func requestPath(head []byte) (string, bool) {
	if len(head) < 12 {
		return "", false
	}
	n := int(binary.BigEndian.Uint32(head[8:]))
	if n <= 0 || n > len(head)-12 {
		return "", false
	}
	return string(head[12 : 12+n]), true
}

// received looks at one reply frame's head.
func (c *handshakeConn) received(i int, head []byte) {
	if i == 0 {
		if h, ok := parseConnectBody(head); ok {
			c.b.handshake.Store(h)
		}
		return
	}
	if len(head) < 16 {
		return
	}
	xid := int32(binary.BigEndian.Uint32(head))
	c.mu.Lock()
	_, create := c.creates[xid]
	delete(c.creates, xid)
	c.mu.Unlock()
	if !create || binary.BigEndian.Uint32(head[12:]) != 0 || len(head) < 20 {
		return
	}
	n := int(binary.BigEndian.Uint32(head[16:]))
	if n <= 0 || n > len(head)-20 {
		return
	}
	c.b.created.record(string(head[20:20+n]), int64(binary.BigEndian.Uint64(head[4:])))
}

// frames cuts a stream into ZooKeeper's frames (a 4-byte big-endian
// length, then the body) and hands the first max bytes of the i-th body to
// f once the frame is whole.
type frames struct {
	max  int
	f    func(i int, head []byte)
	i    int
	size [4]byte
	got  int // bytes of size read
	left int // bytes of the body still to come
	head []byte
}

func (s *frames) feed(p []byte) {
	for len(p) > 0 {
		if s.got < 4 {
			n := copy(s.size[s.got:], p)
			s.got += n
			p = p[n:]
			if s.got < 4 {
				return
			}
			// Clamped so that a hostile length cannot go negative in a 32-bit int.
			s.left = int(min(binary.BigEndian.Uint32(s.size[:]), math.MaxInt32))
			s.head = s.head[:0]
			if s.left == 0 {
				s.done()
			}
			continue
		}
		n := min(len(p), s.left)
		if k := min(n, s.max-len(s.head)); k > 0 {
			s.head = append(s.head, p[:k]...)
		}
		s.left -= n
		p = p[n:]
		if s.left == 0 {
			s.done()
		}
	}
}

func (s *frames) done() {
	s.f(s.i, s.head)
	s.i++
	s.got = 0
}

// parseConnectBody decodes the start of a connect response's body:
// protocolVersion (int32), timeOut (int32, milliseconds) and sessionId
// (int64), all big-endian.
func parseConnectBody(body []byte) (*handshake, bool) {
	if len(body) < 16 {
		return nil, false
	}
	ms := int32(binary.BigEndian.Uint32(body[4:]))
	id := int64(binary.BigEndian.Uint64(body[8:]))
	return &handshake{id: id, timeout: time.Duration(ms) * time.Millisecond}, true
}

// created records the zxids of our lock nodes' creates, read from the
// replies' headers: ZooKeeper answers a write with the zxid of its
// transaction, which is the created node's czxid, so a node needs no read
// for its token. Only the replies for protected names an acquire announced
// (expect) are kept, until it takes them or gives up.
type created struct {
	mu      sync.Mutex
	want    map[string]map[string]int64 // path before the sequence → path → czxid
	written map[string]chan struct{}    // path before the sequence → closed once its create is written
}

// syncs tells the callers of syncThen when a sync of their path is
// written to the connection.
type syncs struct {
	mu      sync.Mutex
	written map[string][]chan struct{} // path → closed at its next sync's write
}

// announce returns a channel that is closed when the next sync of path,
// sent by any caller, is written to the connection, before its bytes
// leave: a request the zk client queues after that is served after that
// sync. Its caller calls forget with it once done.
func (s *syncs) announce(path string) chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = map[string][]chan struct{}{}
	}
	s.written[path] = append(s.written[path], ch)
	return ch
}

// forget drops ch, announced for path, if no sync has closed it.
func (s *syncs) forget(path string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	chs := slices.DeleteFunc(s.written[path], func(c chan struct{}) bool { return c == ch })
	if len(chs) == 0 {
		delete(s.written, path)
	} else {
		s.written[path] = chs
	}
}

// sending is told the path of each sync request as it is written. The zk
// client writes its requests from one goroutine, each in one Write, in
// the order they were queued: a request queued after this call goes out
// after the sync.
func (s *syncs) sending(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.written[path] {
		close(ch)
	}
	delete(s.written, path)
}

// seqLen is the length of the sequence ZooKeeper appends to a sequential
// node's name.
const seqLen = 10

func (c *created) expect(target string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.want == nil {
		c.want = map[string]map[string]int64{}
	}
	c.want[target] = map[string]int64{}
}

func (c *created) forget(target string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.want, target)
	delete(c.written, target)
}

// announce returns a channel that is closed when the next create request
// for target is written to the connection, before its bytes leave: a
// request the zk client queues after that is sent after the create.
func (c *created) announce(target string) <-chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written == nil {
		c.written = map[string]chan struct{}{}
	}
	c.written[target] = ch
	return ch
}

// sending is told the path of each create request as it is written.
func (c *created) sending(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.written[path]; ok {
		close(ch)
		delete(c.written, path)
	}
}

func (c *created) record(path string, zxid int64) {
	if len(path) <= seqLen {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.want[path[:len(path)-seqLen]]; ok {
		m[path] = zxid
	}
}

// take returns the czxid of the node at path, created with the name
// target announced by expect, if its reply was read.
func (c *created) take(target, path string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	z, ok := c.want[target][path]
	return z, ok
}
