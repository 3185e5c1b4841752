package etcdlock

import (
	"context"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock/driver"
)

// liveSession returns a live session of b for ttl (the tests that use it
// have one owner per Backend), or nil.
func liveSession(b *Backend, ttl time.Duration) *session {
	if driver.CheckTTL(ttl) != nil {
		return nil
	}
	secs := ttlSeconds(ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, s := range b.sessions {
		if k.secs == secs {
			return s
		}
	}
	return nil
}

// Prefix returns the prefix of b's lock names.
func (b *Backend) Prefix() string { return b.cfg.prefix }

// Queued returns the number of lock names whose turn an acquire, a lease
// or a clean-up of b has or awaits.
func Queued(b *Backend) int { return b.queue.Len() }

// SessionDone returns the Done channel of b's concurrency.Session for ttl:
// etcd's own signal that the session ended. Nil if there is none.
func SessionDone(b *Backend, ttl time.Duration) <-chan struct{} {
	if s := liveSession(b, ttl); s != nil {
		return s.cs.Done()
	}
	return nil
}

// SessionLease returns the etcd lease of b's session for ttl, or 0.
func SessionLease(b *Backend, ttl time.Duration) clientv3.LeaseID {
	if s := liveSession(b, ttl); s != nil {
		return s.id
	}
	return 0
}

// OrphanSession stops the keep-alive of b's session for ttl, as the etcd
// client does on its own when etcd has not answered for a TTL: the session's
// Done closes while its lease may still live in etcd.
func OrphanSession(b *Backend, ttl time.Duration) bool {
	s := liveSession(b, ttl)
	if s != nil {
		s.cs.Orphan()
	}
	return s != nil
}

// ParsedURL is what OpenURL reads from a URL.
type ParsedURL struct {
	Endpoints      []string
	Prefix         string
	User, Password string
	TLS            bool
	DialTimeout    time.Duration
	RequestTimeout time.Duration
}

// ParseURL parses an OpenURL URL without connecting.
func ParseURL(raw string) (ParsedURL, error) {
	u, err := parseURL(raw)
	if err != nil {
		return ParsedURL{}, err
	}
	return ParsedURL{u.endpoints, u.prefix, u.user, u.password, u.Scheme == "etcds", u.dialTimeout, u.requestTimeout}, nil
}

// TryFault loses the reply of a chosen Txn that the Backend sends through
// its view of the client: the Txn that creates a lock key (a try's, and
// the one a blocking acquire makes before it waits) takes effect in etcd, and the acquire sees an error, as when the
// connection breaks while the reply is on its way.
type TryFault struct {
	next atomic.Pointer[func()]
}

// InterceptTries puts a TryFault on b's view of its client. Call it before
// b's first acquire.
func InterceptTries(b *Backend) *TryFault {
	f := &TryFault{}
	b.view.KV = &faultyKV{KV: b.view.KV, f: f}
	return f
}

// LoseNextReply makes the next such Txn take effect, then run fault (to cut
// the network before the acquire cleans up), then fail.
func (f *TryFault) LoseNextReply(fault func()) { f.next.Store(&fault) }

type faultyKV struct {
	clientv3.KV
	f *TryFault
}

func (k *faultyKV) Txn(ctx context.Context) clientv3.Txn {
	return &faultyTxn{Txn: k.KV.Txn(ctx), f: k.f}
}

type faultyTxn struct {
	clientv3.Txn
	f *TryFault
}

func (t *faultyTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *faultyTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *faultyTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *faultyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err != nil {
		return resp, err
	}
	if fault := t.f.next.Swap(nil); fault != nil {
		(*fault)()
		return nil, status.Error(codes.Unavailable, "test: the reply of the Txn was lost")
	}
	return resp, nil
}

// Waiting returns the number of acquirers of key waiting for its turn,
// besides the one that has it.
func Waiting(b *Backend, key string) int { return b.queue.Waiting(b.KeyPath(key)) }

// LockName is Backend.KeyPath under prefix, for tests without a Backend.
var LockName = lockName

// WatchLog records the start revisions of the watches a Backend opens
// through its view of the client.
type WatchLog struct {
	revs   chan int64
	before atomic.Pointer[func()]
}

// BeforeEach makes f run before each watch is opened, after its start
// revision was recorded.
func (w *WatchLog) BeforeEach(f func()) { w.before.Store(&f) }

// InterceptWatches puts a WatchLog on b's view of its client. Call it
// before b's first acquire.
func InterceptWatches(b *Backend) *WatchLog {
	w := &WatchLog{revs: make(chan int64, 64)}
	b.view.Watcher = &loggedWatcher{Watcher: b.view.Watcher, log: w}
	return w
}

// Next returns the start revision of the next watch opened (0: from the
// current revision), or false if none is opened before ctx ends.
func (w *WatchLog) Next(ctx context.Context) (int64, bool) {
	select {
	case rev := <-w.revs:
		return rev, true
	case <-ctx.Done():
		return 0, false
	}
}

// Pending returns the number of watches opened that Next has not returned.
func (w *WatchLog) Pending() int { return len(w.revs) }

type loggedWatcher struct {
	clientv3.Watcher
	log *WatchLog
}

func (w *loggedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	select {
	case w.log.revs <- clientv3.OpGet(key, opts...).Rev():
	default:
	}
	if f := w.log.before.Load(); f != nil {
		(*f)()
	}
	return w.Watcher.Watch(ctx, key, opts...)
}

// MaxResyncs is maxResyncs, for tests.
const MaxResyncs = maxResyncs

// ReaderCreates runs a function once, when the next transaction of a
// Backend that creates a reader's key has taken effect and before its reply
// reaches the reader (which still has the lock name's turn then, if it
// waited for it).
type ReaderCreates struct {
	next atomic.Pointer[func()]
}

// InterceptReaderCreates puts a ReaderCreates on b's view of its client.
// Call it before b's first acquire.
func InterceptReaderCreates(b *Backend) *ReaderCreates {
	r := &ReaderCreates{}
	b.view.KV = &readerKV{KV: b.view.KV, r: r}
	return r
}

// Next makes f run at the next creation of a reader's key.
func (r *ReaderCreates) Next(f func()) { r.next.Store(&f) }

type readerKV struct {
	clientv3.KV
	r *ReaderCreates
}

func (k *readerKV) Txn(ctx context.Context) clientv3.Txn {
	return &readerTxn{Txn: k.KV.Txn(ctx), r: k.r}
}

type readerTxn struct {
	clientv3.Txn
	r       *ReaderCreates
	creates bool
}

func (t *readerTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *readerTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *readerTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		if op.IsPut() && isShared(op.KeyBytes()) {
			t.creates = true
		}
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *readerTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.creates {
		if f := t.r.next.Swap(nil); f != nil {
			(*f)()
		}
	}
	return resp, err
}
