package driver

import (
	"context"
	"time"
)

// Backend is a lock service. Each backend package (memlock, filelock,
// redislock, etcdlock, ...) implements it; the Client consumes it and adds
// what is the same everywhere: the local deadline, renewal, reentrancy,
// multi-key locks and retries.
//
// A Backend reports facts (a token, a confirmed validity, a loss) and owns no
// policy. Implementations must be safe for concurrent use.
//
// The kinds of lock service map onto it as follows:
//
//   - A TTL service (redislock, memlock): Acquire sets the key with the TTL;
//     Validity is the TTL from the send time of the request; Refresh extends
//     it. Redis expires grants silently and never calls OnLost (memlock
//     calls it only when a test revokes a grant).
//   - A session service (etcdlock; ZooKeeper likewise, with an ephemeral
//     sequential node): grants live as long as a session, which the backend
//     keeps alive. Validity is the session's TTL from the send time of the
//     last keep-alive (or heartbeat) the server confirmed, Refresh reports
//     that, and OnLost fires when the session is reported expired. Waiting
//     watches the predecessor in the service's queue.
//   - A lock with no time bound, held by a connection or a process
//     (filelock's flock; PostgreSQL's advisory locks, whose Acquire blocks
//     in the server's own lock queue): Validity.TTL is 0, and the Client
//     then keeps no local deadline; for PostgreSQL OnLost fires when the
//     connection holding the lock breaks. The token comes from a durable sequence
//     incremented in the transaction or statement that takes the lock.
//   - A quorum of independent services (Redlock): the Lease combines N
//     leases; Validity is the TTL less the time the quorum took and the
//     clock drift, from the send time of the first request; the token is
//     derived from counters read and written on a majority.
type Backend interface {
	// Acquire asks for key. With opts.Wait it blocks until the key is granted
	// or ctx ends, waiting on the service's own signal (a watch, a pub/sub
	// message, a server-side queue) rather than polling, except as a fallback
	// for silent expiry. Without opts.Wait it tries once and returns an error
	// matching ErrNotAcquired when the key is held.
	//
	// When ctx ends it returns an error matching ctx.Err(). Transient
	// failures are returned wrapped with ErrUnavailable. Whatever it returns,
	// an Acquire that fails must not leave a grant behind (a request whose
	// reply was lost is cleaned up by the backend).
	//
	// ctx may stay live after Acquire returns (when the caller's context
	// never ends, until the Client is closed): whatever Acquire starts
	// with it (a goroutine, a context.AfterFunc, a derived context) it
	// ends before returning, or that stays until Close.
	//
	// It checks key, opts and ctx with CheckAcquire before anything else:
	// callers other than the Client reach it too (the conformance suite
	// gives it bad keys and TTLs). It escapes characters of a valid key that
	// the service cannot store, so that distinct keys never share a lock.
	Acquire(ctx context.Context, key string, opts AcquireOptions) (Lease, error)
}

// AcquireOptions are what the Client asks of a Backend for one grant.
type AcquireOptions struct {
	// TTL is the lease duration asked for. Session backends may round it up
	// to what the service supports and report the result in Validity.
	TTL time.Duration

	// Wait selects blocking (true) or a single try (false).
	Wait bool

	// Owner describes the holder for status listings (e.g. "host:pid").
	// It is informational only; ownership checks use the backend's own
	// unguessable identity.
	Owner string

	// OnLost, when not nil, is called at most once, from any goroutine, when
	// the service reports that this grant is gone (a session expired, a
	// connection holding the lock broke). It must not block. Backends that
	// cannot tell never call it; the Client's local deadline covers them.
	OnLost func(err error)

	// Election, when not empty, says that this grant is a candidacy in
	// the election of that name (package election): key is then the
	// election's lock key, and Owner the candidate's value, which
	// OwnerSetter changes (Proclaim). A backend whose service has an
	// election layout of its own keeps the candidacy in that layout (see
	// "Elections" in the package documentation); every other backend
	// ignores it and grants key as a lock, the token from its counter.
	Election string

	// Writer, when true, says that this exclusive grant is the write lock
	// of a read/write lock (package rwlock). It excludes as every grant of
	// Acquire does; a backend whose service has a read/write layout of its
	// own (ZooKeeper's, from Curator) keeps it there as the writer, so
	// that the layout's readers see it. Every other backend ignores it.
	// AcquireShared ignores it too.
	Writer bool
}

// Lease is one grant of a key by a Backend. Its methods are safe for
// concurrent use.
type Lease interface {
	// Token is the fencing token of this grant: unique per grant and
	// strictly greater than every token granted before it for the same key
	// by the same deployment, and never 0 (tokens need not start at 1 nor be
	// consecutive).
	Token() uint64

	// Validity reports what the service confirmed when it granted the lease.
	Validity() Validity

	// Refresh extends the lease to ttl and reports the new confirmed
	// validity. It is owner-checked: if the grant is gone (expired, or now
	// held by another) it changes nothing and returns an error matching
	// ErrLockLost.
	Refresh(ctx context.Context, ttl time.Duration) (Validity, error)

	// Release gives the key up. It is owner-checked: if the grant was
	// already gone it changes nothing and returns an error matching
	// ErrLockLost, so that a holder learns its lock had lapsed.
	Release(ctx context.Context) error
}

// Validity is a confirmation from a lock service: the grant stays valid for
// at least TTL measured from Sent, a local time (with its monotonic reading)
// taken before the confirming request was sent. A zero TTL means the grant
// has no time bound and lasts until the service reports it lost (for example
// a PostgreSQL session lock).
type Validity struct {
	Sent time.Time
	TTL  time.Duration
}

// BatchRefresher is implemented by backends that can refresh many leases in
// one round trip. The Client's watchdog uses it, when present, to renew all
// due locks at once.
type BatchRefresher interface {
	// RefreshAll refreshes leases (all obtained from this backend) to ttl.
	// The result has one entry per lease, in order.
	RefreshAll(ctx context.Context, leases []Lease, ttl time.Duration) []RefreshResult
}

// RefreshResult is the outcome of refreshing one lease in a batch.
type RefreshResult struct {
	Validity Validity
	Err      error
}

// Lister is implemented by backends that can list current holders, for
// `distlock status`.
type Lister interface {
	// List returns the holders of keys starting with prefix, sorted by key.
	// A backend that implements SharedLocks lists a key's shared grants
	// too, with Shared set, after its exclusive holder and by token.
	List(ctx context.Context, prefix string) ([]Holder, error)
}

// Holder describes the current grant of one key.
type Holder struct {
	Key     string
	Token   uint64
	Owner   string    // AcquireOptions.Owner of the holder, if the backend stores it
	Since   time.Time // when it was granted, if known
	Expires time.Time // when the service will expire it unless refreshed; zero if unbounded or unknown
	Slot    int       // a permit's slot, when HasSlot
	HasSlot bool      // a permit asked with Semaphore.Slots; false for a lock
	Shared  bool      // a shared (read) grant (SharedLocks); false for a lock or permit
}
