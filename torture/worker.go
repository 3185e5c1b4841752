package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/rwlock"
	"github.com/distlock/distlock/semaphore"
)

// WorkerEnv is the environment variable that turns a process into a
// worker: its value is the harness's control address. A test binary that
// runs scenarios calls RunWorkerIfRequested first thing in TestMain.
const WorkerEnv = "DISTLOCK_TORTURE_WORKER"

// RunWorkerIfRequested runs the worker and exits the process when WorkerEnv
// is set (or serves a gateway when GatewayEnv is); otherwise it returns at once. Call it at the start of TestMain,
// before flag parsing, so that the harness can re-execute the test binary
// as a worker.
func RunWorkerIfRequested() {
	runGatewayIfRequested()
	addr := os.Getenv(WorkerEnv)
	if addr == "" {
		return
	}
	if err := runWorker(addr); err != nil {
		fmt.Fprintln(os.Stderr, "torture worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// worker is the state of a worker process. Its main goroutine executes the
// harness's commands one at a time; each held lock has a goroutine that
// reports the end of its context.
type worker struct {
	name string
	out  *json.Encoder
	outM sync.Mutex
	in   chan request

	kind    string
	rawURL  string
	client  *distlock.Client
	closer  io.Closer
	etcd    *etcdlock.Backend // for the naive release
	raw     *redis.Client     // for naive operations on Redis
	store   *storeClient
	elect   bool // acquire campaigns, release resigns
	permit  bool // acquire takes a permit of a semaphore of limit 1
	rw      bool // acquire takes the rwlock's write lock, or a read lock
	lock    held
	set     *distlock.LockSet // a lock set held (cmdAcquireAll), in place of lock
	grant   int
	watches sync.WaitGroup
	// observing ends the observers (cmdObserve) at close.
	observing context.Context
	stopObs   context.CancelFunc
	// members is the worker's membership of a group (cmdMember).
	members *memberState
}

// held is what a worker holds: a *distlock.Lock, or an election's term.
type held interface {
	Token() uint64
	Err() error
	Done() <-chan struct{}
	Deadline() (time.Time, bool)
	Release(ctx context.Context) error
}

// term is a held election term: its release is Resign.
type term struct{ *election.Term }

func (t term) Release(ctx context.Context) error { return t.Resign(ctx) }

func runWorker(addr string) error {
	redis.SetLogger(quietLogger{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	w := &worker{name: os.Getenv(WorkerEnv + "_NAME"), out: json.NewEncoder(conn), in: make(chan request)}
	w.observing, w.stopObs = context.WithCancel(context.Background())
	w.send(reply{Event: evHello, Name: w.name, Pid: os.Getpid()})
	go func() {
		defer close(w.in)
		dec := json.NewDecoder(bufio.NewReader(conn))
		for {
			var r request
			if err := dec.Decode(&r); err != nil {
				return
			}
			w.in <- r
		}
	}()
	defer w.close()
	for r := range w.in {
		if r.Cmd == cmdExit {
			w.close()
			w.send(reply{ID: r.ID})
			return nil
		}
		w.send(w.exec(r))
	}
	return nil
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func (w *worker) send(r reply) {
	w.outM.Lock()
	defer w.outM.Unlock()
	_ = w.out.Encode(r)
}

func (w *worker) close() {
	w.stopObs()
	w.leave()
	if w.client != nil {
		// Release what is held; give-backs still retried in the background
		// are not waited for long: the run is over.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.client.Close(ctx)
		cancel()
		w.client = nil
	}
	w.watches.Wait()
	if w.closer != nil {
		_ = w.closer.Close()
		w.closer = nil
	}
	if w.raw != nil {
		_ = w.raw.Close()
		w.raw = nil
	}
	if w.store != nil {
		w.store.close()
	}
}

func (w *worker) exec(r request) reply {
	ctx := context.Background()
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	rep := reply{ID: r.ID, ReadSeq: -1, WriteSeq: -1}
	fail := func(err error) reply {
		rep.Err, rep.ErrKind = err.Error(), errKind(err)
		return rep
	}
	switch r.Cmd {
	case cmdOpen:
		if err := w.open(ctx, r); err != nil {
			return fail(err)
		}
	case cmdAcquire:
		if w.lock != nil || w.set != nil {
			return fail(errors.New("already holding a lock"))
		}
		l, err := w.acquire(ctx, r)
		if err != nil {
			return fail(err)
		}
		rep.Granted = time.Now().UnixNano()
		w.grant++
		w.lock = l
		rep.Token, rep.Grant = l.Token(), w.grant
		if p, ok := l.(*semaphore.Permit); ok && r.Limit > 1 {
			rep.Slot = p.Slot()
		}
		w.reportEnd(l, w.grant)
	case cmdAcquireAll:
		if w.lock != nil || w.set != nil {
			return fail(errors.New("already holding a lock"))
		}
		s, err := w.client.AcquireAll(ctx, r.Keys, distlock.WithWait(r.Wait))
		if err != nil {
			return fail(err)
		}
		rep.Granted = time.Now().UnixNano()
		w.set = s
		for _, l := range s.Locks() {
			w.grant++
			rep.Parts = append(rep.Parts, setPart{Key: l.Key(), Grant: w.grant, Token: l.Token()})
			w.reportEnd(l, w.grant)
		}
	case cmdRead:
		h := w.holding(r.Key)
		if h == nil {
			return fail(errors.New("no lock held"))
		}
		if !r.NoCheck && !live(h) {
			return fail(errNotLive)
		}
		v, seq, err := w.store.read(r.Resource, h.Token(), r.StoreTimeout)
		if err != nil {
			return fail(err)
		}
		rep.Value, rep.ReadSeq, rep.LiveAfter = v, seq, live(h)
	case cmdWrite:
		h := w.holding(r.Key)
		if h == nil {
			return fail(errors.New("no lock held"))
		}
		w.write(&rep, r, h, r.Value)
	case cmdRMW:
		h := w.holding(r.Key)
		if h == nil {
			return fail(errors.New("no lock held"))
		}
		if !live(h) && !r.NoCheck {
			return fail(errNotLive)
		}
		v, seq, err := w.store.read(r.Resource, h.Token(), r.StoreTimeout)
		if err != nil {
			return fail(err)
		}
		rep.Value, rep.ReadSeq = v, seq
		if r.Announce {
			// Checked: live. Now report, and wait until the harness has
			// done what it wanted to do to us (typically: stopped us).
			rep.Deadline = w.announce(h)
			// The write goes out without a second check: the pause came
			// between the check and the write.
			r.NoCheck = true
			select {
			case <-h.Done():
				rep.DoneBefore = true
			default:
			}
		}
		w.write(&rep, r, h, v+1)
	case cmdSharedRead:
		if w.lock == nil {
			return fail(errors.New("no lock held"))
		}
		if !live(w.lock) {
			return fail(errNotLive)
		}
		if r.Announce {
			// Checked: live. The read goes out without a second check.
			rep.Deadline = w.announce(w.lock)
		}
		v, seq, err := w.store.read(r.Resource, w.lock.Token(), r.StoreTimeout)
		if err != nil {
			return fail(err)
		}
		rep.Value, rep.ReadSeq = v, seq
		if r.Validate {
			// The read stands only if no write with a token above the
			// lock's own was admitted before it: the store's highest
			// admitted token, asked after the read, is at least that of
			// every write the read may have seen.
			h, err := w.store.highest(r.Resource, r.StoreTimeout)
			if err != nil {
				return fail(err)
			}
			rep.Highest, rep.Discarded = h, h > w.lock.Token()
		}
	case cmdRelease:
		if s := w.set; s != nil {
			// Each part's outcome: lost before the release (Err says
			// released once it ran), or what its own release said.
			w.set = nil
			parts := s.Locks()
			lost := make([]bool, len(parts))
			for i, l := range parts {
				lost[i] = errors.Is(l.Err(), distlock.ErrLockLost)
			}
			err := s.Release(ctx)
			for i, l := range parts {
				p := setPart{Key: l.Key(), Lost: lost[i]}
				if perr := partErr(err, l.Key()); perr != nil {
					p.Err, p.ErrKind = perr.Error(), errKind(perr)
					p.Lost = p.Lost || p.ErrKind == kindLost
				}
				rep.Parts = append(rep.Parts, p)
			}
			if err != nil {
				rep.Err, rep.ErrKind = err.Error(), errKind(err)
			}
			return rep
		}
		if w.lock == nil {
			return fail(errors.New("no lock held"))
		}
		l := w.lock
		w.lock = nil
		if err := l.Release(ctx); err != nil {
			return fail(err)
		}
	case cmdMember:
		if err := w.member(r); err != nil {
			return fail(err)
		}
	case cmdStubborn:
		if err := w.setStubborn(r.Stubborn); err != nil {
			return fail(err)
		}
	case cmdObserve:
		if err := w.observe(r.Key); err != nil {
			return fail(err)
		}
	case cmdNaiveRelease:
		if err := w.naiveRelease(ctx, r.Key); err != nil {
			return fail(err)
		}
	case cmdNaiveAcquire:
		ok, err := w.naiveAcquire(ctx, r.Key, r.TTL)
		if err != nil {
			return fail(err)
		}
		if !ok {
			return fail(fmt.Errorf("%w: held", distlock.ErrNotAcquired))
		}
	default:
		return fail(fmt.Errorf("unknown command %q", r.Cmd))
	}
	return rep
}

// announce reports the announce, waits for the harness's go and returns
// the lock's latest local deadline meanwhile (Unix nanoseconds, 0 if it
// had none). Deadline reports nothing once the lock has ended, so it is
// read before the announce, which the harness may answer by stopping the
// worker at once, and every millisecond until the go, so that the
// deadline of a renewal confirmed before the stop is read before it. A
// renewal confirmed in the last millisecond before the stop may be
// missed; a lock whose deadline passed during the stop is never renewed
// after it (Err is exact: ended). A lock already ended at the first read
// ended by then: that instant is returned, before any stop.
func (w *worker) announce(h held) int64 {
	var latest int64
	read := func() {
		if d, ok := h.Deadline(); ok {
			latest = max(latest, d.UnixNano())
		}
	}
	read()
	if latest == 0 && h.Err() != nil {
		latest = time.Now().UnixNano()
	}
	w.send(reply{Event: evAnnounce})
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-w.in:
			if !ok || m.Cmd == cmdGo {
				read()
				return latest
			}
		case <-tick.C:
			read()
		}
	}
}

// reportEnd reports the end of grant's context, once it ends, as an
// evEnd event.
func (w *worker) reportEnd(l held, grant int) {
	w.watches.Add(1)
	go func() {
		defer w.watches.Done()
		<-l.Done()
		err := l.Err()
		w.send(reply{Event: evEnd, Grant: grant, Cause: err.Error(), Lost: errors.Is(err, distlock.ErrLockLost)})
	}()
}

// partErr returns the error among a lock set's release errors (joined,
// each a *distlock.KeyError) that names key, or nil.
func partErr(err error, key string) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ke *distlock.KeyError
		if errors.As(e, &ke) && ke.Key == key {
			return e
		}
	}
	return nil
}

// holding returns what a store request with key takes its token from and
// proves live: the part of the held lock set named key, or the held lock
// (or term); nil if none.
func (w *worker) holding(key string) held {
	if w.set == nil {
		return w.lock
	}
	l := w.set.Lock(key)
	if l == nil {
		return nil
	}
	return setHeld{l, w.set}
}

// setHeld is a part of a held lock set, as a store request sees it: the
// part's token and deadline, and live only while the whole set is
// (LockSet.Err is nil only while every part is held), as a holder of a
// set checks the set before it writes.
type setHeld struct {
	l *distlock.Lock
	s *distlock.LockSet
}

func (p setHeld) Token() uint64                     { return p.l.Token() }
func (p setHeld) Err() error                        { return p.s.Err() }
func (p setHeld) Done() <-chan struct{}             { return p.s.Done() }
func (p setHeld) Deadline() (time.Time, bool)       { return p.l.Deadline() }
func (p setHeld) Release(ctx context.Context) error { return p.s.Release(ctx) }

// write sends a write of value with h's token and fills rep.
func (w *worker) write(rep *reply, r request, h held, value int64) {
	if !r.NoCheck && !live(h) {
		rep.Outcome = writeSkipped
		return
	}
	seq, stale, err := w.store.write(r.Resource, h.Token(), value, r.StoreTimeout)
	rep.WriteSeq = seq
	switch {
	case err != nil && errKind(err) == kindTimeout:
		rep.Outcome, rep.Detail = writeTimeout, err.Error()
	case err != nil:
		rep.Outcome, rep.Detail = writeError, err.Error()
	case stale:
		rep.Outcome = writeStale
	default:
		rep.Outcome = writeOK
	}
	rep.LiveAfter = live(h)
}

var errNotLive = errors.New("torture: lock not live")

// live reports whether l is live. Lock.Err is exact at the instant of the
// call: it covers a local deadline passed before the watchdog has run (after
// a pause) and a lock the Client has just ended. (This once checked Err,
// then Deadline: a lock whose loss etcd reported between the two calls,
// ended but its context not yet cancelled, looked live with no deadline.
// That was the one overlap counted on etcd, in a pause round.)
func live(l held) bool {
	return l != nil && l.Err() == nil
}

// acquire takes the lock of r.Key, or, in an election worker, campaigns in
// the election named r.Key with the worker's name as its value; in a
// permit worker it takes the permit of the semaphore named r.Key, and in
// a read/write worker the write lock of the rwlock named r.Key (a read
// lock with r.Shared).
func (w *worker) acquire(ctx context.Context, r request) (held, error) {
	if w.elect {
		if !r.Wait || r.NoRetry {
			return nil, errors.New("a campaign waits, with the Client's retries")
		}
		e, err := election.New(w.client, r.Key)
		if err != nil {
			return nil, err
		}
		t, err := e.Campaign(ctx, w.name)
		if err != nil {
			return nil, err
		}
		return term{t}, nil
	}
	opts := []distlock.LockOption{distlock.WithWait(r.Wait)}
	if r.NoRetry {
		opts = append(opts, distlock.WithRetry(distlock.NoRetry))
	}
	if w.rw {
		rw, err := rwlock.New(w.client, r.Key, rwlock.WithLockOptions(opts...))
		if err != nil {
			return nil, err
		}
		var acquire func(context.Context) (*distlock.Lock, error)
		switch {
		case r.Shared && r.Wait:
			acquire = rw.RLock
		case r.Shared:
			acquire = rw.TryRLock
		case r.Wait:
			acquire = rw.Lock
		default:
			acquire = rw.TryLock
		}
		l, err := acquire(ctx)
		if err != nil {
			return nil, err // not a nil *Lock in a held
		}
		return l, nil
	}
	if w.permit {
		limit, sopts := 1, []semaphore.Option{semaphore.WithLockOptions(opts...)}
		if r.Limit > 1 {
			limit, sopts = r.Limit, append(sopts, semaphore.WithSlots())
		}
		s, err := semaphore.New(w.client, r.Key, limit, sopts...)
		if err != nil {
			return nil, err
		}
		acquire := s.Acquire
		if !r.Wait {
			acquire = s.TryAcquire
		}
		p, err := acquire(ctx)
		if err != nil {
			return nil, err // not a nil *Permit in a held
		}
		return p, nil
	}
	l, err := w.client.Acquire(ctx, r.Key, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// observe follows the election named key until the worker exits: every
// leader Observe sends becomes an evLeader event, and the end of its
// channel one with Closed set.
func (w *worker) observe(key string) error {
	e, err := election.New(w.client, key)
	if err != nil {
		return err
	}
	ch := e.Observe(w.observing)
	w.watches.Add(1)
	go func() {
		defer w.watches.Done()
		for l := range ch {
			w.send(reply{Event: evLeader, Token: l.Token, Leader: l.Value})
		}
		w.send(reply{Event: evLeader, Closed: true})
	}()
	return nil
}

func errKind(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errNotLive):
		return kindNotLive
	case errors.Is(err, distlock.ErrNotAcquired):
		return kindNotAcquired
	case errors.Is(err, distlock.ErrLockLost):
		return kindLost
	case errors.Is(err, distlock.ErrNotHeld):
		return kindNotHeld
	case errors.Is(err, distlock.ErrUnavailable):
		return kindUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return kindTimeout
	}
	return kindOther
}

func (w *worker) open(ctx context.Context, r request) error {
	var (
		b   driver.Backend
		err error
	)
	w.kind, w.rawURL = r.Backend, r.URL
	switch r.Backend {
	case backendRedis:
		var rb *redislock.Backend
		rb, err = redislock.OpenURL(ctx, r.URL)
		if err == nil {
			b, w.closer = rb, rb
			var o *redis.Options
			if o, err = redis.ParseURL(r.URL); err == nil {
				w.raw = redis.NewClient(o)
			}
		}
	case backendEtcd:
		var eb *etcdlock.Backend
		eb, err = etcdlock.OpenURL(ctx, r.URL)
		if err == nil {
			b, w.closer, w.etcd = eb, eb, eb
		}
	case backendFile:
		b, err = filelock.OpenURL(ctx, r.URL)
	case backendZK:
		b, w.closer, err = openZK(ctx, r)
	case backendPG:
		b, w.closer, err = openPG(ctx, r)
	case backendGateway:
		b, w.closer, err = openGateway(ctx, r)
	case backendRedlock:
		b, w.closer, err = openRedlock(ctx, r)
	default:
		err = fmt.Errorf("unknown backend %q", r.Backend)
	}
	if err != nil {
		return err
	}
	opts := []distlock.Option{distlock.WithTTL(r.TTL), distlock.WithDrift(r.Drift), distlock.WithSafetyMargin(r.Margin), distlock.WithOwner(w.name)}
	if r.RenewEvery > 0 {
		opts = append(opts, distlock.WithRenewal(r.RenewEvery))
	}
	if w.client, err = distlock.New(b, opts...); err != nil {
		return err
	}
	w.store = &storeClient{addr: r.StoreAddr, worker: w.name}
	w.elect, w.permit, w.rw = r.Election, r.Permit, r.RW
	return nil
}

// naiveRelease deletes the lock of key whoever holds it: the guide's
// release without the owner check.
func (w *worker) naiveRelease(ctx context.Context, key string) error {
	switch w.kind {
	case backendRedis:
		return w.raw.Del(ctx, RedisLockKey(key)).Err()
	case backendEtcd:
		_, err := w.etcd.Client().Delete(ctx, w.etcd.KeyPath(key)+"/", clientv3.WithPrefix())
		return err
	}
	return fmt.Errorf("no naive release for backend %q", w.kind)
}

// naiveAcquire is the guide's first lock: SET key value NX PX ttl, once,
// with nothing done when the reply is lost.
func (w *worker) naiveAcquire(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if w.kind != backendRedis {
		return false, fmt.Errorf("no naive acquire for backend %q", w.kind)
	}
	return w.raw.SetNX(ctx, RedisLockKey(key), w.name+"|naive", ttl).Result()
}

// RedisLockKey is the Redis key of a lock taken by redislock with the
// default prefix: redislock.DefaultPrefix + redislock.HashTag(key) + ":lock".
func RedisLockKey(key string) string {
	return redislock.DefaultPrefix + redislock.HashTag(key) + ":lock"
}

// RedisTokenKey is the Redis key of the fencing counter of a lock taken by
// redislock with the default prefix.
func RedisTokenKey(key string) string {
	return redislock.DefaultPrefix + redislock.HashTag(key) + ":token"
}

// storeClient is a worker's connection to the Store; it reconnects after
// an error or a timeout (a late reply must not be read as the next one's).
type storeClient struct {
	addr, worker string
	conn         net.Conn
	r            *bufio.Reader
}

const defaultStoreTimeout = 10 * time.Second

func (c *storeClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *storeClient) do(line string, timeout time.Duration) ([]string, error) {
	if timeout <= 0 {
		timeout = defaultStoreTimeout
	}
	deadline := time.Now().Add(timeout)
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, timeout)
		if err != nil {
			return nil, err
		}
		c.conn, c.r = conn, bufio.NewReader(conn)
		if _, err := c.roundTrip("HELLO "+c.worker, deadline); err != nil {
			c.close()
			return nil, err
		}
	}
	f, err := c.roundTrip(line, deadline)
	if err != nil {
		c.close()
	}
	return f, err
}

func (c *storeClient) roundTrip(line string, deadline time.Time) ([]string, error) {
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if _, err := c.conn.Write([]byte(line + "\n")); err != nil {
		return nil, err
	}
	s, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	f := strings.Fields(s)
	if len(f) == 0 || f[0] == "ERR" {
		return nil, fmt.Errorf("store: %s", strings.TrimSpace(s))
	}
	return f, nil
}

func (c *storeClient) read(resource string, token uint64, timeout time.Duration) (int64, int, error) {
	f, err := c.do(fmt.Sprintf("R %s %d", resource, token), timeout)
	if err != nil {
		return 0, -1, err
	}
	if len(f) != 3 || f[0] != "V" {
		return 0, -1, fmt.Errorf("store: unexpected reply %q", f)
	}
	seq, err1 := strconv.Atoi(f[1])
	v, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, -1, fmt.Errorf("store: unexpected reply %q", f)
	}
	return v, seq, nil
}

// highest asks the store for the highest token admitted for resource.
func (c *storeClient) highest(resource string, timeout time.Duration) (uint64, error) {
	f, err := c.do("H "+resource, timeout)
	if err != nil {
		return 0, err
	}
	if len(f) != 2 || f[0] != "H" {
		return 0, fmt.Errorf("store: unexpected reply %q", f)
	}
	h, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("store: unexpected reply %q", f)
	}
	return h, nil
}

func (c *storeClient) write(resource string, token uint64, value int64, timeout time.Duration) (seq int, stale bool, err error) {
	f, err := c.do(fmt.Sprintf("W %s %d %d", resource, token, value), timeout)
	if err != nil {
		return -1, false, err
	}
	if len(f) < 2 || (f[0] != "OK" && f[0] != "STALE") {
		return -1, false, fmt.Errorf("store: unexpected reply %q", f)
	}
	if seq, err = strconv.Atoi(f[1]); err != nil {
		return -1, false, fmt.Errorf("store: unexpected reply %q", f)
	}
	return seq, f[0] == "STALE", nil
}
