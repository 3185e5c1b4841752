package zklock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
)

// Defaults of the options.
const (
	// DefaultSessionTimeout is the session timeout a Backend asks for when
	// WithSessionTimeout is not given.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultRequestTimeout bounds each request the Backend makes of
	// ZooKeeper on its own behalf when WithRequestTimeout is not given.
	DefaultRequestTimeout = 5 * time.Second
)

// maxPrefixLen bounds the prefix so that lock paths stay far below
// ZooKeeper's packet size limit.
const maxPrefixLen = 1024

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix         string
	sessionTimeout time.Duration
	requestTimeout time.Duration
	acl            []zk.ACL
	auth           []authInfo
}

type authInfo struct {
	scheme string
	auth   []byte
}

// WithPrefix sets the ZooKeeper path under which the locks live (see
// Backend.KeyPath). Backends, and Curator locks, contend for the same locks when
// they use the same paths. Default: DefaultPrefix ("/distlock"). It must be
// an absolute path other than "/", outside /zookeeper, of at most 1024
// bytes, without a trailing "/" or a segment that starts with a dot.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithSessionTimeout sets the session timeout the Backend asks ZooKeeper
// for. The ensemble may grant another (between 2 and 20 ticks by default);
// five twelfths of the granted one is the TTL of every Validity (see
// Guarantees in the package documentation). Default:
// DefaultSessionTimeout (10s). It must be at least 100ms.
func WithSessionTimeout(d time.Duration) Option {
	return func(c *config) { c.sessionTimeout = d }
}

// WithRequestTimeout bounds each request the Backend makes of ZooKeeper on
// its own: a create, a listing, a refresh, a release, a clean-up. An
// unreachable ensemble then fails with distlock.ErrUnavailable after this
// long, not at the caller's deadline. Waiting for a held lock is bounded by
// the caller's context only. Default: DefaultRequestTimeout (5s). It must
// be positive.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout = d }
}

// WithDigestAuth authenticates the session with ZooKeeper's digest scheme
// as user and creates lock nodes and their parents with that user allowed
// everything and anyone allowed to read (so that List works for operators
// with other credentials). ZooKeeper accepts any digest credentials: they
// name the identity the ACLs check, and a wrong password shows as
// zk.ErrNoAuth on nodes made with the right one. Default: no
// authentication, and open ACLs (world:anyone:cdrwa, as Curator's
// default).
func WithDigestAuth(user, password string) Option {
	return func(c *config) {
		c.auth = append(c.auth, authInfo{"digest", []byte(user + ":" + password)})
		c.acl = append(zk.DigestACL(zk.PermAll, user, password), zk.WorldACL(zk.PermRead)...)
	}
}

// Backend is a driver.Backend over ZooKeeper, with Curator's lock recipe
// and node layout. See the package documentation for its safety model. It
// is safe for concurrent use.
//
// A Backend has one ZooKeeper session, shared by all its locks; when the
// ensemble expires it, the locks it held are lost and a new session serves
// later acquires.
type Backend struct {
	conn   *zk.Conn
	cfg    config
	sorter driver.Sorter

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	handshake    atomic.Pointer[handshake] // the latest connect reply
	noContainers atomic.Bool               // the ensemble refused a container node
	watchEvents  atomic.Int64              // node watch events the session received
	created      created                   // czxids of our creates, from their replies
	syncs        syncs                     // the writes of our syncs (see syncThen)

	// Set by tests only, before the first Acquire: beforeWatch runs between
	// a waiter's listing and its watch on pred, beforeGrant between the
	// listing that shows our node first and the check of its owner, and
	// uuid, if not nil, replaces newUUID.
	beforeWatch func(pred string)
	beforeGrant func(node string)
	uuid        func() (string, error)

	// life says whether the Backend is open and tracks the goroutines it
	// starts; Close shuts it holding mu, so that under mu it stays as read.
	life *driver.Tracker

	mu      sync.Mutex
	sess    *session      // the current session; nil before the first and after an expiry
	changed chan struct{} // closed and replaced whenever sess changes

	// watchers are the waiters by the node they watch (see watch).
	watchMu  sync.Mutex
	watchers map[string]map[*watcher]struct{}
}

// session is one ZooKeeper session of the Backend, with the leases held in
// it. Its fields other than id and timeout are guarded by Backend.mu.
type session struct {
	id      int64
	timeout time.Duration // as negotiated with the ensemble
	done    chan struct{} // closed when the session ends
	lost    error         // why it ended
	leases  map[*lease]struct{}
}

// validity is how long a confirmation of the session holds, from the
// confirming request's send time: the session timeout, less the lag of
// the leader's knowledge of the session's requests (see Guarantees in the
// package doc). The leader expires a session a session timeout after it
// last heard of it; a follower tells the leader of its clients' requests
// in its answer to the leader's pings, every half tick, and a server's
// tick is at most half the session timeout it grants (unless its
// minSessionTimeout is set lower), so a quarter of the timeout; and the
// request the leader last heard of may be the one before the confirming
// request, which the zk client sends within a third of the timeout (it
// pings that often).
func (s *session) validity() time.Duration { return s.timeout - s.timeout/4 - s.timeout/3 }

// handshake is what a connect reply said.
type handshake struct {
	id      int64
	timeout time.Duration
}

// New returns a Backend with a session of its own on the ensemble whose
// client addresses ("host:port") are servers. It connects in the
// background: an unreachable ensemble is reported by Acquire. A bad option
// returns an error matching distlock.ErrInvalidOption.
//
// Unlike the other backends' New, it takes addresses rather than the
// caller's client, because what the Backend must see of a *zk.Conn can only
// be arranged when the connection is made (see "Why New takes addresses"
// in the package documentation); Conn returns the connection it makes.
func New(servers []string, opts ...Option) (*Backend, error) {
	cfg := config{
		prefix:         DefaultPrefix,
		sessionTimeout: DefaultSessionTimeout,
		requestTimeout: DefaultRequestTimeout,
		acl:            zk.WorldACL(zk.PermAll),
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := checkPrefix(cfg.prefix); err != nil {
		return nil, fmt.Errorf("%w: zklock: %w", driver.ErrInvalidOption, err)
	}
	switch {
	case len(servers) == 0:
		return nil, fmt.Errorf("%w: zklock: no server address", driver.ErrInvalidOption)
	case cfg.sessionTimeout < 100*time.Millisecond || cfg.sessionTimeout > driver.MaxTTL:
		return nil, fmt.Errorf("%w: zklock: session timeout %v is not in [100ms, %v]", driver.ErrInvalidOption, cfg.sessionTimeout, driver.MaxTTL)
	case cfg.requestTimeout <= 0:
		return nil, fmt.Errorf("%w: zklock: request timeout %v is not positive", driver.ErrInvalidOption, cfg.requestTimeout)
	}
	for _, s := range servers {
		if s == "" {
			return nil, fmt.Errorf("%w: zklock: empty server address", driver.ErrInvalidOption)
		}
	}
	b := &Backend{cfg: cfg, life: driver.NewTracker(ErrClosed), changed: make(chan struct{})}
	b.sorter = driver.Sorter{Pkg: "zklock", Permanent: permanent, RequestTimeout: cfg.requestTimeout}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	conn, _, err := zk.Connect(servers, cfg.sessionTimeout,
		zk.WithDialer(b.dial),
		zk.WithHostProvider(newHosts(time.Now)),
		zk.WithEventCallback(b.onEvent),
		zk.WithLogger(quiet{}),
		zk.WithLogInfo(false),
	)
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("%w: zklock: %w", driver.ErrInvalidOption, err)
	}
	b.conn = conn
	for _, a := range cfg.auth {
		// AddAuth is queued before any other request and resent on every
		// reconnection; its answer comes once a connection is made.
		b.life.Go(func() { _ = conn.AddAuth(a.scheme, a.auth) })
	}
	return b, nil
}

// quiet drops the zk client's log lines, which would print on every
// reconnection.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// Conn returns the ZooKeeper connection the Backend uses, for data the
// application keeps beside its locks. Closing it ends the Backend's session.
func (b *Backend) Conn() *zk.Conn { return b.conn }

// Close ends the Backend's session, which deletes every lock node it has
// (their holders are told through OnLost), ends every acquire in progress
// with ErrClosed and closes the connection. Calling Close again does
// nothing.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.life.Shut() {
		b.mu.Unlock()
		return nil
	}
	// The session ends in the step that makes it no longer current: an
	// acquire that finds no current session finds why its own ended.
	b.cancel()
	cause := fmt.Errorf("%w: %w", ErrSessionLost, ErrClosed)
	leases := b.endLocked(b.sess, cause)
	b.sess = nil
	close(b.changed) // acquires waiting for a session see the close
	b.changed = make(chan struct{})
	b.mu.Unlock()
	loseAll(leases, cause)
	b.conn.Close() // closes the session: the ensemble deletes its nodes
	b.life.Wait()
	return nil
}

// call runs f, one request of the zk client (which takes no context), in a
// goroutine and waits for it until ctx ends. The zk client answers every
// request in bounded time (it fails them when its connection breaks or
// closes), so the goroutine ends soon after. If ctx ends first and orphan
// is not nil, the goroutine hands f's result to orphan, which then owns
// whatever the request created.
func call[T any](ctx context.Context, b *Backend, f func() (T, error), orphan func(T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	done := make(chan result, 1)
	var mu sync.Mutex
	abandoned := false // guarded by mu
	started := b.life.Go(func() {
		v, err := f()
		mu.Lock()
		if abandoned {
			mu.Unlock()
			if orphan != nil {
				orphan(v, err)
			}
			return
		}
		done <- result{v, err}
		mu.Unlock()
	})
	if !started {
		return zero, ErrClosed
	}
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-done:
		return r.v, r.err
	default:
		abandoned = true
		return zero, ctx.Err()
	}
}

// request bounds ctx by the request timeout.
func (b *Backend) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.requestTimeout)
}

// currentSession returns the live session, waiting for one (the first, or
// the next after an expiry) until ctx or rctx ends (two contexts, so that
// the common case, a session at hand, needs no context joining them).
func (b *Backend) currentSession(ctx, rctx context.Context) (*session, error) {
	for {
		b.mu.Lock()
		if b.life.Closed() {
			b.mu.Unlock()
			return nil, ErrClosed
		}
		s, changed := b.sess, b.changed
		b.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			// Acquire reports the caller's own context ending as such.
			return nil, fmt.Errorf("%w: zklock: no session with ZooKeeper in time", driver.ErrUnavailable)
		case <-rctx.Done():
			return nil, fmt.Errorf("%w: zklock: no session with ZooKeeper in time", driver.ErrUnavailable)
		}
	}
}

// liveSession returns the session whose id is id if it is the current one.
func (b *Backend) liveSession(id int64) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sess != nil && b.sess.id == id {
		return b.sess
	}
	return nil
}

// onEvent wakes the waiters that watch the node of a node event, and
// follows the session through the zk client's state changes. A
// disconnection does nothing here: the leases' validity runs from the last
// reply of the ensemble, so the Client's deadline ends them unless the
// connection comes back (with the session) in time.
func (b *Backend) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		if ev.Type != zk.EventNotWatching {
			b.watchEvents.Add(1)
		}
		if ev.Path != "" {
			b.wakeWatchers(ev)
		}
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		h := b.handshake.Load()
		if h == nil || h.id == 0 {
			return
		}
		b.mu.Lock()
		if b.life.Closed() || (b.sess != nil && b.sess.id == h.id) {
			b.mu.Unlock()
			return
		}
		var (
			cause  error
			leases map[*lease]struct{}
		)
		if old := b.sess; old != nil {
			// Missed the expiry: a new session means the old one is gone.
			cause = fmt.Errorf("%w: session %#x replaced by %#x (expired)", ErrSessionLost, old.id, h.id)
			leases = b.endLocked(old, cause)
		}
		b.sess = &session{id: h.id, timeout: h.timeout, done: make(chan struct{}), leases: map[*lease]struct{}{}}
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
		loseAll(leases, cause)
	case zk.StateExpired:
		b.mu.Lock()
		old := b.sess
		if old == nil {
			b.mu.Unlock()
			return
		}
		cause := fmt.Errorf("%w: ZooKeeper expired session %#x", ErrSessionLost, old.id)
		leases := b.endLocked(old, cause)
		b.sess = nil
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
		loseAll(leases, cause)
	}
}

// endLocked ends s (if not nil and not yet ended) with cause, with b.mu
// held: its waiters stop, and it returns its leases, for loseAll to tell
// their holders once b.mu is released. Whoever makes s no longer current
// ends it in the same step, so that an acquire that finds its session
// gone (see liveSession) also finds why (see sessionErr).
func (b *Backend) endLocked(s *session, cause error) map[*lease]struct{} {
	if s == nil || s.lost != nil {
		return nil
	}
	s.lost = cause
	leases := s.leases
	s.leases = nil
	close(s.done)
	return leases
}

// loseAll tells the holders of leases, taken from their ended session by
// endLocked, that they are lost.
func loseAll(leases map[*lease]struct{}, cause error) {
	for l := range leases {
		l.lose(cause)
	}
}

// register adds a granted lease to its session; it fails if the session
// has ended.
func (b *Backend) register(l *lease) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.life.Closed():
		return ErrClosed
	case l.sess.lost != nil:
		return fmt.Errorf("%w: granted in a session that had ended: %w", driver.ErrUnavailable, l.sess.lost)
	}
	l.sess.leases[l] = struct{}{}
	return nil
}

func (b *Backend) unregister(l *lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(l.sess.leases, l)
}

// sessionErr returns why s ended, or nil while it lives.
func (b *Backend) sessionErr(s *session) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return s.lost
}

// Acquire implements driver.Backend.
//
// Every acquire creates its own lock node, so acquires of one key through
// one Backend queue in ZooKeeper like those of different processes, in the
// order of their nodes. The grant's validity is five twelfths of the
// session timeout the ensemble granted, from the send time of the request
// that confirmed, through the leader, that our node was first and owned by
// the current session; opts.TTL is only checked (the session timeout is set once, by WithSessionTimeout). A try
// (opts.Wait false) fails with distlock.ErrNotAcquired when another node
// is ahead of ours. Shared grants' nodes (AcquireShared, and Curator's
// read locks) are among those it waits for.
//
// A writer (opts.Writer) creates a node of Curator's
// InterProcessReadWriteLock layout, "__WRIT__", in place of a lock node,
// so that Curator's read locks see it, and waits and is granted as a lock
// is (see Shared locks in the package documentation).
//
// An election's candidacy (opts.Election) creates a node of Curator's
// LeaderLatch layout in place of a lock node, with opts.Owner as its data
// as it is, and waits and is granted as a lock is (see Elections in the
// package documentation).
//
// A waiter whose session ends while it waits gets an error matching
// distlock.ErrUnavailable and ErrSessionLost, never the lock. An acquire
// that fails or is cancelled deletes the node it created or may have
// created; if ZooKeeper does not answer within the request timeout, it
// returns and a goroutine goes on deleting it.
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	a := &acquire{b: b, key: key, dir: b.KeyPath(key), opts: opts}
	l, err := a.run(ctx)
	if err != nil {
		if ctx.Err() != nil && !errorsIsClosed(err) {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	return l, nil
}
