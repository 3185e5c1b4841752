// Package driver is what a lock service's backend implements and what
// every backend shares. Users of distlock need it only to name a
// Backend; package distlock is their API, as database/sql is for
// database/sql/driver.
//
// # What a backend implements
//
// A backend package offers a Backend: Acquire asks the service for a key
// and returns a Lease, whose Token is the grant's fencing token and whose
// Validity is what the service confirmed. The Client of package distlock
// owns the policy: the local deadline, renewal, reentrancy, several keys
// at once, retries. A backend reports facts and keeps no policy of its own.
// A backend may also implement BatchRefresher (renew many leases in one
// round trip), Lister (distlock status), HolderReader (the holder of
// exactly one key), HolderWatcher (a push-based watch of it, for
// Client.Watch and elections) and Semaphores (permits of counting
// semaphores, see Semaphores) and SharedLocks (read locks, see Shared
// locks), and its leases OwnerSetter (a new owner
// for a held grant, for an election's Proclaim). The Client falls back to
// Lister, then to polling, when a backend lacks one, or when it returns
// an error matching errors.ErrUnsupported.
//
// A backend also has a Close() error method, outside the Backend interface:
// the Client's Close releases its locks but does not close its Backend, so
// whoever made the Backend closes it after the Client. Close ends the
// Acquires waiting in it with the package's ErrClosed (see ClosedError, and
// Waiter.Closing, a channel the backend closes itself), and later Acquires
// fail with it. The conformance suite closes backends through that method.
//
// Every backend passes the conformance suite of package distlocktest
// against its real service; that suite is the precise statement of the
// contracts below.
//
// # The kit
//
// What every backend would otherwise write again lives here, so that
// backends cannot drift apart:
//
//   - CheckAcquire, CheckTTL and Canceled: the checks of Acquire's input,
//     in one order with one set of errors, and the error of an acquisition
//     that its context ended.
//   - ClosedError and Tracker: a backend's ErrClosed, whether it is open,
//     and the goroutines its Close waits for.
//   - Sorter: the one rule that sorts a client library's errors into a
//     Backend's contract (the caller's context ended; the backend's own
//     request bound passed; a refusal no retry can fix; ErrUnavailable).
//   - Retry: background retries of a clean-up whose reply was lost.
//   - Queue: one process's acquirers of a key, served in arrival order, so
//     that one of them at a time talks to the service about the key.
//   - URLForm, ParseURL and URL: the one reader of backend URLs (see URLs
//     below).
//   - Redact, Scrub, WithoutSecrets: what of a URL may ever be shown.
//     Redact shows nothing of the user information, the user name
//     included: a mistyped URL can put the password there. Scrub masks a
//     password wherever a message shows it, and a user name where it
//     stands as a word, but not within the URL as Redact shows it, nor
//     where the user name is also a shown part of the URL (a user named
//     postgres leaves "postgres://" as it is).
//   - TLSConfig, IsTLSFailure, ExpectsTLS: client TLS from PEM files,
//     telling a TLS failure from a network one, and a server that expects
//     TLS from one that does not.
//   - Wait: the loop of a blocking Acquire (see Waiting).
//   - ValidateKey, MaxKeyLen, MaxTTL, CheckOwner, MaxOwnerLen,
//     CheckPermit, MaxPermits, LimitError, UnknownLimit and the
//     errors (ErrNotAcquired, ErrLockLost, ErrUnavailable, ErrInvalidKey,
//     ErrInvalidOption, ErrClosed), which package distlock exports under
//     the same names.
//
// # Waiting
//
// A backend whose service does not wait on its behalf (as a statement
// blocked in the server's lock queue, or a long poll, does) waits in the
// client with Wait: it gives a Waiter whose Try asks the service once, and
// Wait runs the loop. A try that finds the key held returns a Held: the
// channel that will wake the waiter when the key may be free (a release
// message, a watch that the try set), and how long to wait at most
// without one (the holder's expiry, a poll, a backoff).
//
// A wake-up reaches only the waiters subscribed when the service sends
// it, so the order matters. A service whose watch is set by the try itself,
// atomically with its read (a ZooKeeper getData watch, an in-process
// channel), returns it in Held.Wake and needs nothing else. A service
// whose subscription is separate from the try (Redis pub/sub, inotify)
// sets Waiter.Subscribe: after a try that found the key held with nothing
// watching it, Wait subscribes, waits for the service's confirmation (at
// most ConfirmWait, the same for every backend) and tries again, because
// a release between the first try and the subscription reached nobody. An
// uncontended Acquire thus costs one try and no subscription. A backend
// that keeps a subscription between Acquires (a channel that lingers)
// registers the waiter before calling Wait and returns the subscription's
// channel from the first try: that try is covered.
//
// Wait reports the end of ctx before anything else (with Canceled), then
// the backend's Close (Waiter.Closing), and calls Waiter.Leave once on
// every return without a grant, so that the waiter leaves nothing in the
// service's queue. Fallback timers are the backend's to choose: jitter
// them (ExponentialBackoff's full jitter) when waiters of several
// processes would otherwise try together. A waiter whose place in the
// service's queue survives a transient failure (a ZooKeeper node, while
// its session lives) may answer it with a Held and a backoff; others
// return the error, and the Client retries. A watch stream that says more
// than "wake up" may keep its own loop: etcdlock's watch starts at the
// revision of the read that found the predecessor, so it cannot miss the
// release, and its messages (a compaction, a watch registered late) each
// need their own answer.
//
// Wait is for Acquire with AcquireOptions.Wait; without it, a backend calls
// its Try once and answers a Held with ErrNotAcquired. Wait orders nothing
// either: every waiter that a wake-up reaches tries again, and the first try
// to reach the service wins. A backend whose acquirers within one process
// should be served in arrival order, one request per key at a time, takes
// the key's Turn of a Queue before it asks the service (see Queue).
//
// # Elections
//
// Package election keeps an election as the lock of the election's key
// (a key under its KeyPrefix), held by the leader, with the candidate's
// value as the grant's owner, on every backend: a term is a lock, with
// the Client's policy (deadline, renewal, loss). A backend whose service
// has an election layout of its own, which the service's other clients
// use (etcd's concurrency.Election, `etcdctl elect`), may keep the
// candidacies there, so that those clients take part in the same
// elections. Such a backend:
//
//   - grants a candidacy (AcquireOptions.Election not empty) in its
//     layout, at a place it derives from the key, or from the election's
//     name, and never shared with a lock of another key; the Lease is
//     one grant as for a lock (Token, Validity, Refresh, owner-checked
//     Release), and its Token is strictly greater than every earlier
//     term's and every earlier lock's of the key;
//   - stores Owner as the candidate's value where the layout keeps it,
//     and lets its leases change it (OwnerSetter), owner-checked;
//   - reports the leader as the holder of the election's key: Holder
//     gives the live term's token and value, and WatchHolder wakes on
//     every change of leader or value, whoever the candidate is (a
//     client of the service, or this package). Neither needs to be told
//     that the key is an election's: the layout lives at the key's place;
//   - keeps locks of the key excluding candidacies where it can (a layout
//     of the same order at the same place), so that programs that hold
//     the election's key as a lock, an older release among them, still
//     exclude the leader. Where the service's own recipes order their
//     kinds apart (ZooKeeper's Curator: see zklock's Elections), the
//     backend's documentation says which programs do not exclude the
//     leader, and what to do about it.
//
// Every other backend ignores AcquireOptions.Election. Its tokens come
// from the lock counter, so one fence.Register admits locks and terms.
//
// # Semaphores
//
// A counting semaphore grants up to a limit of permits at once on one
// key; package semaphore keeps it at a key under its KeyPrefix. A backend
// that grants permits implements Semaphores; the Client refuses permits
// on any other, with an error matching errors.ErrUnsupported, rather than
// granting a lock in their place. A backend whose grants cannot be proven
// never to over-grant (a quorum of independent nodes, as Redlock's)
// does not implement it. A permit is a lease like a lock, and the Client
// gives it a lock's policy (deadline, renewal, loss, release); it never
// re-enters: a permit asked from within a permit's context is another
// permit. Such a backend:
//
//   - never has more live permits on a key than the limit its askers
//     agree on, and grants one whenever fewer are live and nobody waits
//     before the asker;
//   - stores the limit with the semaphore while a permit of it is live
//     or awaited (a waiter alone keeps it stored), and refuses a permit
//     that names another limit with a *LimitError, granting nothing, so
//     that two programs that disagree never over-grant. When nothing
//     holds or awaits a permit, the next asker sets the limit. A backend
//     whose native layout stores no limit (Curator's
//     InterProcessSemaphoreV2 keeps maxLeases in each client) says so in
//     its documentation: its Permits reports UnknownLimit, a client of the
//     layout with another limit cannot be refused, and the first rule
//     holds among clients that name the same limit only;
//   - makes each permit a Lease as for a lock: Validity, Refresh and
//     Release owner-checked, renewed and lost as the backend's locks are
//     (each on its own TTL, or with the session that holds it), OnLost
//     when the service says a permit is gone. A permit whose holder
//     stopped renewing is given back when its TTL runs out, or when its
//     session ends;
//   - draws each permit's Token from a write made when the permit is
//     granted (a counter of the key bumped by the grant, the revision of
//     the write that grants it), so that it is unique and strictly
//     greater than every token granted before it on the key, a permit's
//     or a lock's. The rank of a waiter's entry in the queue (an etcd
//     create revision, a ZooKeeper node's czxid, a sorted-set score) is
//     drawn when it queues, and a lock or permit granted while it waits
//     has a greater one: it orders the line, but is not a token;
//   - with Semaphore.Slots, gives each permit the lowest slot free when
//     it is granted (SlotLease), so that a permit's token is greater than
//     every earlier token of its slot: one fence per slot admits it. A
//     backend that cannot name slots returns leases without SlotLease,
//     and the Client refuses such a permit with errors.ErrUnsupported;
//   - serves waiters in arrival order, between processes where the
//     service can (a queue ranked by the service: a sequence number, a
//     create revision, the service's clock), and within one process at
//     least (a Queue's Turn). A permit given back wakes the first waiter
//     only where the service can address one (a watch on the entry
//     before the waiter's own, a channel per waiter); Wait offers one
//     wake-up per key (Held.Wake, a subscription every waiter shares),
//     which wakes every waiter to try again, and only the first in line
//     is granted: correct, but each release then costs a try per waiter.
//     A backend on such a channel that means to wake one waiter
//     publishes to the first waiter's own channel, named by its entry;
//   - keeps a waiter's place in line as a lease too: a waiter that dies
//     (killed, cut off) loses its place within a TTL that it renews while
//     it waits, or when its session ends, and with it its hold on the
//     stored limit, so that no dead waiter blocks the line or pins the
//     limit for good. A waiter whose Acquire fails (its context ended)
//     leaves the line, and a permit granted to it as it left is given
//     back: both with retries, or else they lapse within their TTL;
//   - lists live permits, the stored limit and how many wait (Permits).
//
// Where the service's other clients have a semaphore layout of their own
// (Curator's InterProcessSemaphoreV2), a backend keeps permits there, as
// for Elections, and says in its documentation which of the rules above
// the layout cannot keep, and between which clients the rest hold. A
// backend whose locks are advisory locks of a session (pglock) keeps
// permits in lease rows (a row per permit and per waiter, and the limit in
// the semaphore's own row), written under the semaphore's lock: an
// advisory lock per slot can neither store a limit nor serve waiters in
// order across slots, a session blocked on one slot waiting past a slot
// that frees first.
//
// # Shared locks
//
// A shared (read) lock of a key shares the key with the other shared
// locks of it, and excludes the key's exclusive locks, which exclude it:
// the writer of a read/write lock (package rwlock) is the key's ordinary
// lock, so that `distlock run KEY` and `distlock run --shared KEY` behave
// as flock(1) without and with -s. A backend that grants shared locks
// implements SharedLocks, and its Acquire then waits for the key's
// shared holders too; the Client refuses shared locks on any other, with
// an error matching errors.ErrUnsupported. A backend whose grants cannot
// be proven to exclude (a quorum of independent nodes, as Redlock's)
// does not implement it. Such a backend:
//
//   - never grants an exclusive lock while a shared or exclusive grant of
//     the key is live, nor a shared one while an exclusive grant is live;
//   - serves askers in arrival order, with one rule for the kinds: a
//     shared asker is granted when no exclusive grant is live and no
//     exclusive asker waits before it, so that readers arriving together
//     overlap, and a waiting writer blocks the readers who come after it
//     (writers are never starved by a stream of readers); an exclusive
//     asker is granted when nothing is live and nobody waits before it.
//     A try (no Wait) follows the same rules: a shared try fails while a
//     writer holds or waits;
//   - makes each shared grant a Lease as for a lock (Validity, Refresh,
//     Release owner-checked, renewed and lost as its locks are, each on
//     its own TTL: renewing one reader never keeps another, and one
//     lapsing never ends another), and draws its Token as its locks draw
//     theirs (the key's counter, a create revision, a czxid): every token
//     of the key is unique, an exclusive grant's is greater than every
//     earlier grant's, and a shared grant's than every earlier exclusive
//     grant's, so a writer's token fences as a lock's does. Readers
//     granted together may learn of their grants in another order than
//     their tokens';
//   - gives back a shared grant whose holder stopped renewing when its
//     TTL runs out or its session ends, and one granted to an asker whose
//     Acquire failed, as for locks;
//   - keeps a waiting exclusive asker's place in line as a lease too (a
//     waiter that dies or gives up leaves the line, so that readers are not
//     kept out for good), and serves a shared asker that finds no
//     exclusive grant live or awaited without a turn that other readers
//     wait for: readers' tries fail only because of a writer;
//   - lists a key's shared grants (Readers, and Lister's List, with
//     Holder.Shared set), while HolderReader and HolderWatcher report the
//     exclusive holder only: a key that readers alone hold reads as free
//     there, and Client.Watch reports it so. A consumer of List that
//     looks for a key's holder skips the Shared entries.
//
// Where the service's other clients have a read/write layout of their own
// (ZooKeeper: Curator's InterProcessReadWriteLock), a backend keeps shared
// grants there, and the writers that ask with AcquireOptions.Writer, as
// that layout's writers, and says in its documentation which clients
// exclude which: the layout's own readers may see only the writers named
// so, and not the backend's ordinary locks. A backend whose locks are
// PostgreSQL advisory locks takes pg_advisory_lock_shared on the key's
// own lock id, so that psql's shared advisory locks share with its
// readers and block its writers; PostgreSQL's advisory locks of one
// session never conflict with each other, so such a backend holds each
// grant on a session of its own, and a mode without advisory locks (a
// lease table) says that psql's do not take part.
//
// # URLs
//
// A backend that opens from a URL has an OpenURL(ctx, rawURL, opts...),
// which package backends calls for the backend's schemes. It reads the
// URL with ParseURL and a URLForm of its own, so that every backend reads
// URLs by one set of rules and words its errors alike:
//
//	var urlForm = driver.URLForm{
//		Pkg:        "foolock",
//		Schemes:    []string{"foo", "foos"},
//		TLSSchemes: []string{"foos"},
//		Usage: func(scheme string) string {
//			return scheme + "://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/PREFIX][?PARAMS]"
//		},
//	}
//
//	func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
//		u, err := driver.ParseURL(rawURL, urlForm)
//		if err != nil {
//			return nil, err
//		}
//		addrs, err := u.HostPorts("7000")
//		if err != nil {
//			return nil, err
//		}
//		var own []Option
//		if d, ok := u.PositiveDuration("request_timeout"); ok {
//			own = append(own, WithRequestTimeout(d))
//		}
//		lib := u.PassThrough("client_name", "pool_size") // the client library's, a fixed list
//		u.Refuse("node_timeout", "renamed request_timeout")
//		if err := u.Done(); err != nil {
//			return nil, err
//		}
//		tlsConfig, err := u.TLS(nil) // nil for foo://; reads ca, cert and key for foos://
//		...
//		if err := client.Ping(ctx); err != nil {
//			return nil, u.Fail(driver.ErrUnavailable, "ping", err)
//		}
//	}
//
// The rules, which ParseURL and URL's methods apply:
//
//   - The user information is everything between "//" and the last "@",
//     percent-decoded: a password may hold any character as it is, and
//     "@" elsewhere is written %40. The hosts follow, separated by commas
//     (HostPorts checks them; an IPv6 address is written in brackets);
//     then the path, whose meaning is the backend's (a prefix, a
//     database). A URL without "//" or without a host is refused, so that
//     a mistyped URL never reaches a client library's default server.
//   - The query is NAME=VALUE pairs separated by "&", percent-decoded,
//     with "+" a plus (a space is %20). Each parameter is taken by name
//     with a getter (Get, Secret, Bool, Int, Duration,
//     PositiveDuration), which checks its kind, or handed to a client
//     library by PassThrough, from a fixed list of the library's options
//     that the backend documents; ask for every name whatever the URL
//     holds. Then Done refuses the parameters no getter asked for and those
//     given more than once (before any library sees them), with what the
//     getters, Problem and Refuse found wrong, in the order of the
//     parameters' names.
//   - The names say the same thing in every backend: dial_timeout bounds
//     connecting, request_timeout each request the backend makes on its
//     own, prefix is where the backend's keys live, and ca, cert and key
//     are PEM files for TLS, taken with the TLS schemes only (a scheme's
//     TLS twin is its name with an "s": rediss, etcds). Durations are Go
//     durations (1.5s, 300ms). A renamed parameter is refused with its new
//     name (Refuse), never read as an alias.
//   - No error shows more of the URL than Redact does: ParseURL, Bad and
//     Done quote parameter names only when they look like names, never a
//     value, and name a bad host by its place; Fail scrubs the secrets of
//     the URL from a client library's error. A malformed URL's error
//     matches ErrInvalidOption; an unreachable service's, ErrUnavailable.
//   - A plain-text client whose connection the server closed at once
//     (TLSClosedAtOnce), or a backend before connecting, asks
//     URL.ExpectsTLS whether the servers expect TLS, and says so, naming
//     the TLS scheme, rather than reporting them unreachable.
//
// A backend's URL tests fuzz its parsing with distlocktest.PasswordBlind
// (no error depends on the password), and add its schemes to the table of
// package backends' URL tests, which check every backend's refusals.
//
// # Outline of a backend's package documentation
//
// A backend's doc.go opens with one paragraph: the service, what the backend
// is for, and a short example when it needs setting up. Then come these
// sections, with these headings, in this order, so that backends can be
// compared section by section:
//
//   - "# Guarantees": what holds while a grant is valid, from which
//     confirmation its validity is timed (or that it has no time bound), and
//     how a loss is reported (OnLost, or only by the Client's deadline).
//   - "# Not guaranteed": what a user must not assume: pauses longer than
//     the usable TTL, clock faults beyond the drift, operators deleting the
//     service's state, fairness between processes, and whatever else the
//     service does not promise.
//   - "# Durability": what the service must keep for grants to stay
//     exclusive and tokens to keep increasing (fsync settings, no failover
//     to a lagging replica, a directory that survives reboots).
//   - "# Waiting": the service's signal that wakes a waiter, the polling
//     that covers a missed signal, and the order waiters are served in,
//     within one process (Queue) and between processes.
//   - "# Fencing": where the token comes from and why it increases, and the
//     storage-side checks the package offers besides package fence (an
//     atomic check in the service itself, when it has one).
//
// Sections particular to a backend (key layout, URLs, goroutines) follow
// these. Notes on how the code works belong in comments next to that code,
// not in the package documentation, and the documentation speaks only of
// what exists.
package driver
