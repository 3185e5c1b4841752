// Package distlock gives one API over distributed lock services (Redis,
// Redlock over several independent Redis servers, etcd, ZooKeeper,
// PostgreSQL, a distlock gateway, a local host's files, and in-process
// memory) with the parts that make a lock
// safe when things go wrong: a fencing token on every grant, loss delivered
// as a cancelled context before anyone else can hold the key, owner-checked
// renewal and release, push-based waiting, reentrancy and deadlock-free
// multi-key locks.
//
// # Using it
//
// A Client wraps a Backend (see the backend packages: memlock, filelock,
// redislock, redlock, etcdlock, zklock, pglock and gatewaylock; package
// backends opens one from a URL, and package driver is for writing
// another). Acquire waits for a key and returns a Lock:
//
//	b, err := redislock.New(rdb)
//	if err != nil { ... }
//	c, err := distlock.New(b)
//	if err != nil { ... }
//	defer c.Close(ctx)
//	lock, err := c.Acquire(ctx, "accounts/42")
//	if err != nil { ... }
//	err = store.Write(lock.Context(), data, lock.Token()) // the storage checks the token
//	if rerr := lock.Release(ctx); rerr != nil { ... } // ErrLockLost: the write may not have been protected
//
// Do does the same around a function.
//
// # What a lock can promise, and what it cannot
//
// A lock service grants a lease: the key is ours until the lease's TTL runs
// out unless we renew it. The Client renews held locks in the background and
// keeps, for every lock, a local deadline measured on this host's monotonic
// clock from the moment the last confirmed request was sent:
//
//	deadline = sent + TTL*(1-drift) - margin
//
// When the deadline passes without a confirmed renewal, or when the service
// reports the grant gone, the lock's context is cancelled and Err says why
// (errors.Is(err, ErrLockLost)). Because the deadline starts before the
// service received the request and allows for clock-rate drift, the context
// ends before the service can grant the key to anyone else. A context is
// cancelled by a goroutine, which a paused process cannot run on time; Lock.Err
// is exact when called: it reports the lock lost from the instant the
// deadline passes, whether or not the context has been cancelled yet. Check
// Err just before acting on the lock.
//
// That is as far as a lease goes. A process can be paused at any moment (a
// garbage-collection pause, a stopped VM, a swap storm) for longer than the
// TTL: it checks that its context is live, pauses, and then writes after
// another holder got the key. No lock service can prevent this; only the
// storage can, by refusing the late write. Every grant therefore carries a
// fencing token (Lock.Token) that is larger than every earlier token for the
// key; pass it with each write and have the storage refuse a token lower
// than one it has already seen (package fence, and the check-and-write
// helpers of the backend packages). With fencing, a lock is correct even
// when leases fail; without it, a lock is an efficiency measure that usually
// prevents duplicate work.
//
// The same reasoning sets the limits of each backend. A service that loses
// its state (a Redis restarted without fsync, a failover to a replica that
// missed writes) can grant a key twice and, worse, hand out a token again;
// each backend's documentation says which failures it survives.
//
// # Which backend for which need
//
// First ask whether a lock is needed at all: an idempotency key, an atomic
// conditional update (UPDATE ... WHERE version = ?), or partitioning the work
// so that each item has one owner often removes the need. If duplicate work
// is merely wasteful (a cache refresh, a report sent twice), a single Redis
// (redislock) is fast and enough. If duplicate work is wrong (money, a
// ledger, one writer per account), use a consensus service (etcdlock) and
// check the fencing token in the storage. For processes on
// one host, filelock needs nothing installed; memlock serves tests and
// single-process programs. If one process among many must do a job for as
// long as it can (a leader), use package election on the same backend:
// its terms are locks, fenced the same way. If at most N may work at once,
// use package semaphore, on a backend that grants permits (memlock, for
// now): each permit is a lease with its own token.
//
// # Waiting, reentrancy, several keys
//
// Waiting is push-based: each backend waits on its service's own signal (a
// watch, a pub/sub message, the kernel) and polls only as a fallback for a
// holder that vanished silently. A Lock's context can be passed back to
// Acquire to take the same key again (reentrancy, counted, see WithMaxDepth).
// AcquireAll takes several keys in sorted order, all or nothing, so callers
// asking for the same keys in any order cannot deadlock.
// Client.Holder reads who holds exactly one key, and Client.Watch
// follows it, woken by the backend where it can watch the key.
//
// A lock acquired under another lock's context (or a lock set's) is nested
// in it: its context ends when the enclosing lock ends, so that work under
// both stops, but the nested lock itself stays held, and renewed, until its
// holder releases it. Its Err is then an *EnclosingError saying which
// enclosing lock ended and why; it never reports a lock lost or released
// that the service still holds for this Client. The parts of a lock set
// are side by side: one part lost ends the set (its Err names the part),
// not the other parts.
//
// # Cost
//
// A Client runs one watchdog goroutine while it holds locks, whatever their
// number (and for about a second after the last), keeps them in a heap
// ordered by their next event, and renews the locks that are due together
// (in one round trip on backends that batch).
//
// # Metrics
//
// A Client records OpenTelemetry metrics on the provider WithMeterProvider
// names (default: the global one, a no-op until the application installs
// one), and the fencing guards count the writes they refuse (see
// fence.WithMeterProvider). The names, units and attribute values are part
// of the API:
//
//	distlock.acquire.duration  histogram, s                  outcome: acquired, not_acquired, timeout, canceled, error
//	distlock.hold.duration     histogram, s                  outcome: released, lost, max_hold, closed
//	distlock.locks.held        up-down counter, {lock}
//	distlock.waiters           up-down counter, {acquisition} acquisitions waiting
//	distlock.renewals          counter, {renewal}            outcome: ok, failed, lost
//	distlock.lease.headroom    histogram, s                  time left before the local deadline when a renewal was confirmed
//	distlock.losses            counter, {loss}               reason: deadline, service_reported, revoked, max_hold
//	distlock.fence.rejections  counter, {write}              distlock.guard: fence.Register, redislock.Fence, etcdlock.Fence, pglock.Fence
//
// Every Client measurement carries distlock.backend, the backend's package
// name (memlock, filelock, redislock, etcdlock, ...). Lock keys are never
// attributes; WithKeyLabel adds distlock.key.label, a label of the key
// that must take few values. In Prometheus the names become
// distlock_acquire_duration_seconds, distlock_losses_total,
// distlock_locks_held, and so on.
//
// Counters and up-down counters exist from the start, at 0, for every
// attribute value above (added when the Client or the guard is made: a
// global provider installed later gets the counts, not the zeros), so that an alert on losses sees 0 rather than
// no data; with WithKeyLabel the zero series carry no key label, since the
// labels are not known in advance. Histograms have no zero (a measurement
// is an event): their series appear with the first acquisition, release or
// renewal.
package distlock
