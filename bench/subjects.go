package bench

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/redislock"
)

// Kind says what a subject is in a comparison.
type Kind int

// The kinds of subjects. Goals are judged on KindDistlock subjects against
// the others of their service.
const (
	KindDistlock  Kind = iota // a distlock backend, used through distlock.Client
	KindPeer                  // another library
	KindFloor                 // the least a safe lock can send, raw commands
	KindRoundTrip             // one request, the unit of latency
)

// Measure is a set of measurements.
type Measure uint

// The measurements a subject takes part in.
const (
	Latency    Measure = 1 << iota // uncontended acquire+release
	Throughput                     // 64 goroutines on distinct keys
	Contention                     // waiters on one key: hand-off waste, fairness, herd
	Held                           // 10,000 held locks with renewal
	Election                       // candidates of one election: a resignation to the next term
	Semaphore                      // a permit cycle against the lock cycle, and permits under contention (rows whose backend grants permits)
)

// Locker is one instance of a lock library, standing for one process: its
// own clients and connections. Lock blocks until key is held (or ctx ends)
// the way the library's documentation advises for blocking acquisition,
// and returns the function that releases it. A Locker is safe for
// concurrent use on distinct keys.
type Locker interface {
	Lock(ctx context.Context, key string) (Unlock, error)
	Close() error
}

// Unlock releases what Lock acquired.
type Unlock func(ctx context.Context) error

// Subject is one row of the results: a library (or a floor, or a round
// trip) over one service. Adding a backend or a peer is adding a Subject to
// Subjects.
type Subject struct {
	ID       string // short, unique; used in keys and file names
	Name     string // row label
	Service  string // rows are compared within a service
	Kind     Kind
	Settings string  // how it is configured, in words
	NotBuilt string  // when not empty, the row is reported as not built yet, with this reason
	Measures Measure // what it takes part in
	Polls    bool    // waits by polling (goal 3 compares against these)

	// Open starts one instance (one "process").
	Open func(e *Env) (Locker, error)
	// Counters reads the service's request counters (nil: none).
	Counters func(ctx context.Context, e *Env) (Snapshot, error)
	// Backend opens the distlock backend, for the held-locks measurement.
	Backend func(e *Env) (driver.Backend, func() error, error)
	// Elect starts one candidate (one "process") for the election
	// measurement; nil for a distlock row, whose candidates are package
	// election over the Client that Open returns.
	Elect func(e *Env) (Elector, error)
}

// Has reports whether s takes part in m.
func (s Subject) Has(m Measure) bool { return s.NotBuilt == "" && s.Measures&m != 0 }

// Lock TTLs where a library has no default.
const (
	benchTTL     = 15 * time.Second // distlock's default; given to bsm/redislock and the floor
	bsmRetryStep = 100 * time.Millisecond
)

// Service names.
const (
	SvcRedis   = "Redis"
	SvcRedlock = "Redlock (5 Redis)"
	SvcEtcd    = "etcd"
	SvcZK      = "ZooKeeper"
	SvcPG      = "PostgreSQL"

	SvcInProcess = "in-process (memlock)"
)

// Subjects lists every row, in report order.
var Subjects = []Subject{
	{
		ID: "redis-ping", Name: "Redis PING (one round trip)", Service: SvcRedis, Kind: KindRoundTrip,
		Settings: "go-redis v9 client, default pool", Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			c := e.RedisClient(e.Redis(1)[0])
			return funcLocker{lock: func(ctx context.Context, _ string) (Unlock, error) {
				return noUnlock, c.Ping(ctx).Err()
			}, close: c.Close}, nil
		},
		Counters: redisCounters(1),
	},
	{
		ID: "floor", Name: "floor: SET NX PX + EVALSHA compare-and-DEL", Service: SvcRedis, Kind: KindFloor,
		Settings: "two round trips, owner value unique per grant, TTL 15s, no fencing token; cannot wait",
		Measures: Latency | Throughput,
		Open: func(e *Env) (Locker, error) {
			return &floorLocker{c: e.RedisClient(e.Redis(1)[0]), owner: rand.Text()}, nil
		},
		Counters: redisCounters(1),
	},
	{
		ID: "floor-token", Name: "floor with token: EVALSHA INCR + SET NX PX, EVALSHA compare-and-DEL", Service: SvcRedis, Kind: KindFloor,
		Settings: "as the floor above, plus a fencing token: one script draws it from a counter key (INCR) and sets the lock (SET NX PX); no check of a late copy of a request, no queue; cannot wait",
		Measures: Latency | Throughput,
		Open: func(e *Env) (Locker, error) {
			return &floorLocker{c: e.RedisClient(e.Redis(1)[0]), owner: rand.Text(), token: true}, nil
		},
		Counters: redisCounters(1),
	},
	{
		ID: "bsm", Name: "bsm/redislock v0.9.4", Service: SvcRedis, Kind: KindPeer,
		Settings: "TTL 15s; Obtain with RetryStrategy LinearBackoff(100ms) (the interval of its retry example; its default is NoRetry), until the caller's context ends",
		Measures: Latency | Throughput | Contention, Polls: true,
		Open: func(e *Env) (Locker, error) {
			c := e.RedisClient(e.Redis(1)[0])
			return &bsmLocker{c: c, l: bsm.New(c)}, nil
		},
		Counters: redisCounters(1),
	},
	{
		ID: "redsync1", Name: "redsync v4.18.1 (1 node)", Service: SvcRedis, Kind: KindPeer,
		Settings: "defaults: expiry 8s, 32 tries, retry delay uniform in [50ms, 250ms); LockContext called again after ErrFailed, as its doc advises",
		Measures: Latency | Throughput | Contention, Polls: true,
		Open:     func(e *Env) (Locker, error) { return newRedsync(e, 1), nil },
		Counters: redisCounters(1),
	},
	{
		ID: "distlock-redis", Name: "distlock Redis (Client.Acquire)", Service: SvcRedis, Kind: KindDistlock,
		Settings: "defaults: TTL 15s, renewal every 5s; waiters queue in Redis (FIFO), a release wakes the first live waiter over pub/sub; waiter liveness 3s; fencing token per grant",
		Measures: Latency | Throughput | Contention | Held | Election | Semaphore,
		Open:     func(e *Env) (Locker, error) { return newDistlockRedis(e, redisQueue, false) },
		Counters: redisCounters(1),
		Backend: func(e *Env) (driver.Backend, func() error, error) {
			c := e.RedisClient(e.Redis(1)[0])
			b, err := redislock.New(c)
			if err != nil {
				return nil, nil, errors.Join(err, c.Close())
			}
			return b, func() error { return errors.Join(b.Close(), c.Close()) }, nil
		},
	},
	{
		ID: "distlock-redis-try", Name: "distlock Redis (Client.TryAcquire)", Service: SvcRedis, Kind: KindDistlock,
		Settings: "as above, without waiting (one try)",
		Measures: Latency | Throughput,
		Open:     func(e *Env) (Locker, error) { return newDistlockRedis(e, redisQueue, true) },
		Counters: redisCounters(1),
	},
	{
		ID: "distlock-redis-try-busy", Name: "distlock Redis (Client.TryAcquire, watchdog kept running)", Service: SvcRedis, Kind: KindDistlock,
		Settings: "diagnostic: as TryAcquire, while the same Client holds one other lock, so that its watchdog goroutine never stops between cycles",
		Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			l, err := newDistlockRedis(e, redisQueue, true)
			if err != nil {
				return nil, err
			}
			d := l.(*distlockLocker)
			if _, err := d.c.Acquire(context.Background(), "bench:keep-watchdog-busy"); err != nil {
				return nil, errors.Join(err, d.Close())
			}
			return d, nil // Close releases the held lock with the Client
		},
		Counters: redisCounters(1),
	},
	{
		ID: "redislock-try", Name: "redislock.Backend alone, one try (no Client)", Service: SvcRedis, Kind: KindDistlock,
		Settings: "diagnostic: Backend.Acquire with Wait false and Lease.Release, without distlock.Client (no watchdog, no lock context)",
		Measures: Latency,
		Open:     func(e *Env) (Locker, error) { return newRedislockBackend(e, false) },
		Counters: redisCounters(1),
	},
	{
		ID: "redislock-wait", Name: "redislock.Backend alone, waiting (no Client)", Service: SvcRedis, Kind: KindDistlock,
		Settings: "diagnostic: Backend.Acquire with Wait true and Lease.Release, without distlock.Client",
		Measures: Latency,
		Open:     func(e *Env) (Locker, error) { return newRedislockBackend(e, true) },
		Counters: redisCounters(1),
	},
	{
		ID: "distlock-redis-unordered", Name: "distlock Redis, unordered (Client.Acquire)", Service: SvcRedis, Kind: KindDistlock,
		Settings: "redislock.WithUnordered(): no queue; a release wakes every waiter of the key over pub/sub and they race (the default before the queue)",
		Measures: Latency | Throughput | Contention,
		Open:     func(e *Env) (Locker, error) { return newDistlockRedis(e, redisUnordered, false) },
		Counters: redisCounters(1),
	},
	{
		ID: "redsync5", Name: "redsync v4.18.1 (5 nodes)", Service: SvcRedlock, Kind: KindPeer,
		Settings: "defaults as above, quorum 3 of 5 independent Redis servers",
		Measures: Latency | Throughput | Contention, Polls: true,
		Open:     func(e *Env) (Locker, error) { return newRedsync(e, 5), nil },
		Counters: redisCounters(5),
	},
	distlockRedlock5Subject,
	distlockRedlock1Subject,
	{
		ID: "etcd-get", Name: "etcd serializable GET (one round trip)", Service: SvcEtcd, Kind: KindRoundTrip,
		Settings: "clientv3 v3.7.3", Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			return etcdRoundTrip(e, func(ctx context.Context, cli *clientv3.Client) error {
				_, err := cli.Get(ctx, "bench/rtt", clientv3.WithSerializable())
				return err
			})
		},
		Counters: etcdCounters,
	},
	{
		ID: "etcd-put", Name: "etcd PUT (one write, fsync)", Service: SvcEtcd, Kind: KindRoundTrip,
		Settings: "clientv3 v3.7.3", Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			return etcdRoundTrip(e, func(ctx context.Context, cli *clientv3.Client) error {
				_, err := cli.Put(ctx, "bench/rtt", "x")
				return err
			})
		},
		Counters: etcdCounters,
	},
	{
		ID: "etcd-mutex", Name: "etcd concurrency.Mutex (shared session)", Service: SvcEtcd, Kind: KindPeer,
		Settings: "clientv3 v3.7.3; one Session per instance (default TTL 60s) shared by its Mutexes; Mutex.Lock/Unlock",
		Measures: Latency | Throughput | Contention,
		Open:     openEtcdMutex,
		Counters: etcdCounters,
	},
	{
		ID: "distlock-etcd", Name: "distlock etcd (Client.Acquire)", Service: SvcEtcd, Kind: KindDistlock,
		Settings: "defaults: TTL 15s, renewal every 5s; fencing token = create revision",
		Measures: Latency | Throughput | Contention | Held | Election | Semaphore,
		Open:     openDistlockEtcd,
		Counters: etcdCounters,
		Backend: func(e *Env) (driver.Backend, func() error, error) {
			cli, err := e.EtcdClient(e.Etcd())
			if err != nil {
				return nil, nil, err
			}
			b, err := etcdlock.New(cli)
			if err != nil {
				cli.Close()
				return nil, nil, err
			}
			return b, func() error { return errors.Join(b.Close(), cli.Close()) }, nil
		},
	},
	etcdElectionSubject,                     // election.go
	fileFloor, fileTokenFloor, distlockFile, // subjects_file.go
	gatewayRTT, gatewayDirect, distlockGateway, // subjects_gateway.go
	{
		ID: "memlock-backend", Name: "memlock.Backend alone (no Client)", Service: SvcInProcess, Kind: KindFloor,
		Settings: "diagnostic: the in-process reference backend, Backend.Acquire and Lease.Release; no network, so the row below minus this one is the Client's own cost",
		Measures: Latency,
		Open: func(*Env) (Locker, error) {
			b := memlock.New()
			return funcLocker{lock: func(ctx context.Context, key string) (Unlock, error) {
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: benchTTL, Wait: true})
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}, close: func() error { return nil }}, nil
		},
	},
	{
		ID: "distlock-memlock", Name: "distlock memlock (Client.Acquire)", Service: SvcInProcess, Kind: KindDistlock,
		Settings: "diagnostic: distlock.Client defaults (TTL 15s, renewal on) over memlock; every instance of a run shares one memlock.Backend, as the other rows' instances share their server",
		Measures: Latency | Semaphore,
		Open: func(e *Env) (Locker, error) {
			return newDistlockLocker(sharedMemlock(e), false, func() error { return nil })
		},
	},
	zkExistsSubject,
	zkSetSubject,
	zkFloorSubject,
	zkLockSubject,
	distlockZKSubject,
	pgSelectSubject,
	pgSelectBouncerSubject,
	pgAdvisorySubject,
	distlockPGSubject,
	distlockPGLeaseSubject,
	distlockPGLeaseBouncerSubject,
}

// memlocks holds the in-process backend of each Env: every instance of
// the distlock memlock row ("processes") shares it, as the instances of
// the other rows share their server.
var memlocks sync.Map // *Env -> *memlock.Backend

func sharedMemlock(e *Env) *memlock.Backend {
	if b, ok := memlocks.Load(e); ok {
		return b.(*memlock.Backend)
	}
	b, _ := memlocks.LoadOrStore(e, memlock.New())
	return b.(*memlock.Backend)
}

func redisCounters(n int) func(context.Context, *Env) (Snapshot, error) {
	return func(ctx context.Context, e *Env) (Snapshot, error) { return e.RedisSnapshot(ctx, n) }
}

func etcdCounters(ctx context.Context, e *Env) (Snapshot, error) { return e.EtcdSnapshot(ctx) }

func noUnlock(context.Context) error { return nil }

// funcLocker is a Locker made of functions.
type funcLocker struct {
	lock  func(ctx context.Context, key string) (Unlock, error)
	close func() error
}

func (f funcLocker) Lock(ctx context.Context, key string) (Unlock, error) { return f.lock(ctx, key) }
func (f funcLocker) Close() error                                         { return f.close() }

//go:embed scripts/compare_del.lua
var compareDelLua string

var compareDel = redis.NewScript(compareDelLua)

//go:embed scripts/token_grant.lua
var tokenGrantLua string

var tokenGrant = redis.NewScript(tokenGrantLua)

// errHeld is the floor's answer for a held key: it cannot wait.
var errHeld = errors.New("bench: floor: key is held")

// floorLocker is the floor: SET NX PX, then an owner-checked DEL by script.
// With token, the SET NX PX is in a script that first draws a fencing
// token from the key's counter (token_grant.lua).
type floorLocker struct {
	c     *redis.Client
	owner string
	n     atomic.Uint64
	token bool
}

func (f *floorLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	v := f.owner + strconv.FormatUint(f.n.Add(1), 10)
	var ok bool
	var err error
	if f.token {
		var t int64
		t, err = tokenGrant.Run(ctx, f.c, []string{key, key + ":token"}, v, benchTTL.Milliseconds()).Int64()
		ok = t > 0
	} else {
		ok, err = f.c.SetNX(ctx, key, v, benchTTL).Result()
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errHeld
	}
	return func(ctx context.Context) error {
		n, err := compareDel.Run(ctx, f.c, []string{key}, v).Int()
		if err == nil && n != 1 {
			err = fmt.Errorf("bench: floor: %q was not held", key)
		}
		return err
	}, nil
}

func (f *floorLocker) Close() error { return f.c.Close() }

// bsmLocker is bsm/redislock, retrying as its example does.
type bsmLocker struct {
	c *redis.Client
	l *bsm.Client
}

func (b *bsmLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	for {
		l, err := b.l.Obtain(ctx, key, benchTTL, &bsm.Options{RetryStrategy: bsm.LinearBackoff(bsmRetryStep)})
		if err == nil {
			return l.Release, nil
		}
		// Obtain gives up with ErrNotObtained, or with a deadline of its own
		// when ctx has none; a blocking caller tries again.
		if ctx.Err() != nil || !(errors.Is(err, bsm.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded)) {
			return nil, err
		}
	}
}

func (b *bsmLocker) Close() error { return b.c.Close() }

// redsyncLocker is redsync over n servers with its default settings.
type redsyncLocker struct {
	clients []*redis.Client
	rs      *redsync.Redsync
}

func newRedsync(e *Env, n int) *redsyncLocker {
	r := &redsyncLocker{}
	var pools []redsyncredis.Pool
	for _, addr := range e.Redis(n) {
		c := e.RedisClient(addr)
		r.clients = append(r.clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	r.rs = redsync.New(pools...)
	return r
}

func (r *redsyncLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	m := r.rs.NewMutex(key)
	for {
		err := m.LockContext(ctx)
		if err == nil {
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = fmt.Errorf("bench: redsync: %q not released", key)
				}
				return err
			}, nil
		}
		var taken *redsync.ErrTaken
		if ctx.Err() != nil || !(errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken)) {
			return nil, err
		}
	}
}

func (r *redsyncLocker) Close() error {
	var errs []error
	for _, c := range r.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// distlockLocker is a distlock.Client over a backend.
type distlockLocker struct {
	c     *distlock.Client
	b     driver.Backend // the Client's backend, for what it implements
	try   bool
	close func() error
}

// The ways redislock waiters are served in the Redis rows.
const (
	redisQueue     = iota // the default
	redisUnordered        // WithUnordered
)

func newDistlockRedis(e *Env, mode int, try bool) (Locker, error) {
	c := e.RedisClient(e.Redis(1)[0])
	var opts []redislock.Option
	switch mode {
	case redisUnordered:
		opts = append(opts, redislock.WithUnordered())
	}
	b, err := redislock.New(c, opts...)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return newDistlockLocker(b, try, func() error { return errors.Join(b.Close(), c.Close()) })
}

func openDistlockEtcd(e *Env) (Locker, error) {
	cli, err := e.EtcdClient(e.Etcd())
	if err != nil {
		return nil, err
	}
	b, err := etcdlock.New(cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return newDistlockLocker(b, false, func() error { return errors.Join(b.Close(), cli.Close()) })
}

func newDistlockLocker(b driver.Backend, try bool, closeBackend func() error) (Locker, error) {
	c, err := distlock.New(b)
	if err != nil {
		return nil, errors.Join(err, closeBackend())
	}
	return &distlockLocker{c: c, b: b, try: try, close: closeBackend}, nil
}

func (d *distlockLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	var l *distlock.Lock
	var err error
	if d.try {
		l, err = d.c.TryAcquire(ctx, key)
	} else {
		l, err = d.c.Acquire(ctx, key)
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (d *distlockLocker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(d.c.Close(ctx), d.close())
}

// backendLocker is a redislock.Backend used without a distlock.Client.
type backendLocker struct {
	c    *redis.Client
	b    *redislock.Backend
	wait bool
}

func newRedislockBackend(e *Env, wait bool) (*backendLocker, error) {
	c := e.RedisClient(e.Redis(1)[0])
	b, err := redislock.New(c)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return &backendLocker{c: c, b: b, wait: wait}, nil
}

func (b *backendLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	l, err := b.b.Acquire(ctx, key, driver.AcquireOptions{TTL: benchTTL, Wait: b.wait})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (b *backendLocker) Close() error { return errors.Join(b.b.Close(), b.c.Close()) }

// etcdMutexLocker is concurrency.Mutex on one shared session.
type etcdMutexLocker struct {
	cli *clientv3.Client
	s   *concurrency.Session
}

func openEtcdMutex(e *Env) (Locker, error) {
	cli, err := e.EtcdClient(e.Etcd())
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdMutexLocker{cli: cli, s: s}, nil
}

func (m *etcdMutexLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	mu := concurrency.NewMutex(m.s, key)
	if err := mu.Lock(ctx); err != nil {
		return nil, err
	}
	return mu.Unlock, nil
}

func (m *etcdMutexLocker) Close() error { return errors.Join(m.s.Close(), m.cli.Close()) }

func etcdRoundTrip(e *Env, op func(context.Context, *clientv3.Client) error) (Locker, error) {
	cli, err := e.EtcdClient(e.Etcd())
	if err != nil {
		return nil, err
	}
	return funcLocker{lock: func(ctx context.Context, _ string) (Unlock, error) {
		return noUnlock, op(ctx, cli)
	}, close: cli.Close}, nil
}
