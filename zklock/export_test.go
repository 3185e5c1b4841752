package zklock

import (
	"reflect"
	"sync"
	"unsafe"
)

// SortNodes sorts lock node names into queue order, for tests.
func SortNodes(children []string) []string {
	sortNodes(children)
	return children
}

// WatchEvents returns how many node watch events b's session has received.
// The zk client hands them over, in order, before the replies that follow
// them, so after a reply the count includes every event sent before it.
func (b *Backend) WatchEvents() int64 { return b.watchEvents.Load() }

// Exported for tests.
var (
	NewUUID     = newUUID
	UnescapeKey = unescapeKey
	ProtectedID = protectedID
	NodePrefix  = nodePrefix
	LockPath    = lockPath // Backend.KeyPath under a prefix, for tests without a Backend
)

// URLServers returns the server addresses of a zk:// URL.
func URLServers(raw string) ([]string, error) {
	u, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	return u.servers, nil
}

// SetBeforeWatch makes f run between a waiter's listing and its watch on
// its predecessor. Call it before the Backend's first Acquire.
func (b *Backend) SetBeforeWatch(f func(pred string)) { b.beforeWatch = f }

// ParseURL is OpenURL's parse step, which does no I/O, for the fuzz test.
func ParseURL(raw string) error {
	_, err := parseURL(raw)
	return err
}

// SetUUID makes f give the UUIDs of the protected names of b's nodes. Call
// it before the Backend's first Acquire.
func (b *Backend) SetUUID(f func() (string, error)) { b.uuid = f }

// SetBeforeGrant makes f run between the listing that shows an acquire's
// node first and the check that the node is still its own. Call it before
// the Backend's first Acquire.
func (b *Backend) SetBeforeGrant(f func(node string)) { b.beforeGrant = f }

// ReadAlong feeds what a client wrote to a server (requests) and read from
// it (replies), each cut in two at the given byte, to the reading along of
// the Backend's connections, and reports whether a create request of
// target was seen being written.
func ReadAlong(requests, replies []byte, cutRequests, cutReplies int, target string) bool {
	b := &Backend{}
	written := b.created.announce(target)
	c := &handshakeConn{b: b, creates: map[int32]struct{}{}}
	c.out.max, c.out.f = requestHead, c.sent
	c.in.max, c.in.f = replyHead, c.received
	for _, part := range [][]byte{requests[:cutRequests], requests[cutRequests:]} {
		c.out.feed(part)
	}
	for _, part := range [][]byte{replies[:cutReplies], replies[cutReplies:]} {
		c.in.feed(part)
	}
	select {
	case <-written:
		return true
	default:
		return false
	}
}

// ClientWatches returns how many watches the zk client of b keeps for
// events to come, counted one per registration: the zk client keeps, per
// path and kind of watch, a list to which each request that sets a watch
// adds one, and which only the watch's event (or the session's end) empties.
// The list is private to the zk client, so it is read by reflection, under
// the client's own lock (go-zookeeper v1.0.4's watchers and watchersLock);
// it returns -1 if the zk client keeps them otherwise.
func (b *Backend) ClientWatches() int {
	return b.clientWatches(func(string, int64) bool { return true })
}

// ClientChildWatches returns how many watches on the children of path
// the zk client of b keeps (see ClientWatches), -1 if it keeps them
// otherwise. The kinds of watch are go-zookeeper v1.0.4's: 0 data, 1
// existence, 2 children.
func (b *Backend) ClientChildWatches(path string) int {
	return b.clientWatches(func(p string, kind int64) bool { return p == path && kind == 2 })
}

// clientWatches counts the watches of the zk client of b whose path and
// kind count says to count.
func (b *Backend) clientWatches(count func(path string, kind int64) bool) int {
	v := reflect.ValueOf(b.conn).Elem()
	lock, m := v.FieldByName("watchersLock"), v.FieldByName("watchers")
	if !lock.IsValid() || lock.Type() != reflect.TypeFor[sync.Mutex]() || !m.IsValid() || m.Kind() != reflect.Map {
		return -1
	}
	mu := (*sync.Mutex)(unsafe.Pointer(lock.UnsafeAddr()))
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for it := m.MapRange(); it.Next(); {
		k := it.Key()
		if k.Kind() != reflect.Struct {
			return -1
		}
		p, kind := k.FieldByName("path"), k.FieldByName("wType")
		if !p.IsValid() || p.Kind() != reflect.String || !kind.IsValid() || !kind.CanInt() {
			return -1
		}
		if count(p.String(), kind.Int()) {
			n += it.Value().Len()
		}
	}
	return n
}

// Current reports whether b has a current session.
func (b *Backend) Current() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sess != nil
}
