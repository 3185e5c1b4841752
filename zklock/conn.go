package zklock

import (
	"encoding/binary"
	"errors"
	"net"
	"time"
)

// dial connects to a server for the zk client and watches the connection's
// first reply, the connect response, for the session id and the session
// timeout the server granted: the zk client keeps both to itself, and the
// timeout is the TTL of every Validity (the server may grant less than was
// asked for).
func (b *Backend) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: c, b: b}, nil
}

// handshakeConn copies the bytes of the first reply read from the
// connection until it has the whole connect response. The zk client reads
// that reply in one goroutine before it starts the one that reads the rest,
// so the fields need no lock.
type handshakeConn struct {
	net.Conn
	b    *Backend
	buf  []byte
	seen bool
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.seen && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if h, ok, perr := parseConnectResponse(c.buf); perr != nil || ok {
			c.seen, c.buf = true, nil
			if ok {
				c.b.handshake.Store(h)
			}
		}
	}
	return n, err
}

// parseConnectResponse decodes the start of a connect response: a 4-byte
// length, then protocolVersion (int32), timeOut (int32, milliseconds) and
// sessionId (int64), all big-endian. It reports false while buf is short.
func parseConnectResponse(buf []byte) (*handshake, bool, error) {
	if len(buf) < 4 {
		return nil, false, nil
	}
	n := int(binary.BigEndian.Uint32(buf))
	if n < 16 {
		return nil, false, errors.New("short connect response")
	}
	if len(buf) < 4+16 {
		return nil, false, nil
	}
	ms := int32(binary.BigEndian.Uint32(buf[8:]))
	id := int64(binary.BigEndian.Uint64(buf[12:]))
	return &handshake{id: id, timeout: time.Duration(ms) * time.Millisecond}, true, nil
}
