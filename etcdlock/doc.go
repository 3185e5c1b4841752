// Package etcdlock is a driver.Backend over etcd v3, built on the
// Session of go.etcd.io/etcd/client/v3/concurrency (the lease and its
// keep-alive) and on the lock recipe of its Mutex, whose key layout and
// order it keeps (see Waiting for why it waits in its own way), keeps
// package election's elections in the layout of its Election, which
// `etcdctl elect` shares (see Elections), and grants the permits of
// package semaphore's counting semaphores, each on an etcd lease of its
// own, in a layout of its own ranked as the Mutex ranks its keys (see
// Permits), and the shared (read) locks of package rwlock among the
// Mutex's own keys, so that `etcdctl lock` is a writer of them (see
// Shared locks).
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	backend, _ := etcdlock.New(cli)
//	locks, _ := distlock.New(backend, distlock.WithTTL(10*time.Second))
//	lock, err := locks.Acquire(ctx, "reports/nightly")
//
// # Guarantees
//
// Every lock key is attached to the etcd lease of a session (see Sessions).
// What etcd promises is that such a key exists until it is deleted or the
// lease ends: revoked, or expired at least a TTL after the last keep-alive
// the leader acknowledged. The Mutex grants a lock name to the key created
// first under it, so while the key exists nobody else holds the lock.
//
// The etcd client learns that a lease ended only when etcd says so, or after
// a TTL without any keep-alive answer counted from when the last answer
// arrived; by then etcd may have expired the lease and granted the lock to
// someone else. The Backend does not rely on that signal alone. It reports
// to distlock's Client confirmations timed from before their request was
// sent: each refresh sends one KeepAliveOnce per session, however many locks
// it renews (and checks in one transaction that every lock key is still
// there), and a new grant carries a confirmation no older than a quarter of
// the TTL, re-confirming first when needed. The Client cancels the lock's
// context at sent + TTL×(1−drift) − margin unless a newer confirmation
// comes, which is before etcd can expire the lease when the clocks of this
// host and the etcd leader run at rates within the drift.
//
// A lock is also lost, and its holder told through OnLost, as soon as the
// Backend learns it: etcd answers that the lease is gone, the session's
// keep-alive ends, or a refresh finds the key deleted. A session that ends
// loses all its locks; later acquires use a new session. A waiter whose
// session ends while it waits gets an error matching
// distlock.ErrUnavailable and ErrSessionLost, never the lock.
//
// A shared (read) lock is a key of its own under the lock name, among the
// Mutex's keys and on the same session lease as a lock's, so that it is
// held, renewed, lost and confirmed as a lock is. A reader is granted
// once every key created before its own that is not a reader's is gone,
// and an exclusive lock (distlock's, or a concurrency.Mutex's such as
// `etcdctl lock`) once every key before its own is gone, readers
// included: while a writer's key exists no key created after it is
// granted, and while it holds no reader's key is older than it. So a
// writer never holds with a reader or another writer, and readers hold
// together (see Shared locks).
//
// A permit of a semaphore (see Permits) is an entry on an etcd lease of its
// own, and is held while the entry exists: never more than the limit at
// once, since an entry is granted only while fewer than the limit entries
// were created before it, and entries before it only ever go. Its lease
// is not kept alive in the background: each refresh sends it one
// KeepAliveOnce, so a permit whose holder stops renewing it lapses within
// its TTL, and its Validity is timed from before that request, as a lock's.
// A permit is lost, and its holder told through OnLost, when a refresh
// finds its lease or its entry gone. The limit is stored in every entry,
// and a permit naming another is refused with a *driver.LimitError,
// writing nothing.
//
// Keys, leases and revisions are in the replicated log, so a new leader
// knows every lock, and it restarts every lease's TTL (plus an election
// timeout) when it takes over, which only lengthens leases.
//
// # Not guaranteed
//
//   - Nothing stops a process that pauses for longer than its lock's
//     usable TTL from acting after the lock was lost: use the fence.
//   - Clock rates that differ by more than the drift allowed for.
//   - A leader cut off from the rest of its cluster can go on answering
//     keep-alives until it steps down, for about an election timeout; the
//     new leader's extension normally covers that, and if in doubt, add
//     the election timeout to distlock.WithSafetyMargin.
//   - A lock key deleted by hand (etcdctl del) is noticed at the next
//     refresh, not at once; until then two holders may coexist.
//   - A failed or cancelled acquire deletes the key it may have created
//     (its Txn may have taken effect with its reply lost) before returning,
//     and a release deletes its key, unless etcd does not answer within the
//     request timeout. A goroutine then goes on deleting the key, with
//     random pauses of up to 100ms, doubling up to 2s, until etcd confirms
//     it gone, the session ends (nobody keeps its lease alive any more: the
//     key expires with it) or the Backend is closed. Until then the key may
//     hold the lock for nobody, acquires of the name through this Backend
//     wait, and tries fail with distlock.ErrNotAcquired. A forgotten key
//     would be kept alive by its session for as long as the session lives.
//     An acquire (a wait or a try) cancelled while the transaction that
//     creates its key is on its way waits for etcd's answer (up to the request
//     timeout), so that it knows what to delete: etcd serves each request
//     in a goroutine of its own, and may apply an abandoned transaction
//     after the delete that followed it. A transaction etcd did not answer
//     in time may still be applied late; its key then holds the name until
//     this Backend acquires the name again (it takes the key over) or the
//     session ends.
//   - Fairness between Backends: etcd's order of key creation applies.
//   - A reader's key deleted by hand is noticed at its next refresh, as a
//     lock's; a key created by hand under a lock name with ".shared." in
//     its last part is taken for a reader's, by distlock's readers (they
//     do not wait for it) though not by its writers nor by `etcdctl lock`.
//     A reader's key whose creating transaction etcd did not answer in
//     time may be applied late, after its clean-up: no later acquire
//     takes it over (readers' keys are numbered), so it excludes writers
//     until its session ends or the Backend closes.
//   - Readers granted together, at a writer's release, may learn of it
//     in any order: a reader's token can then be smaller than that of a
//     reader granted an instant before it (see Fencing).
//   - A permit's acquire that fails or is cancelled, and a permit's
//     release, revoke its lease before returning, unless etcd does not
//     answer within the request timeout: a goroutine then goes on revoking
//     it, with the same pauses, until etcd answers or the Backend is
//     closed, and the lease, which nobody renews, lapses within its TTL
//     anyway. A transaction of the acquire that etcd applies late cannot
//     write on a revoked lease.
//   - A permit's loss is learnt at its next refresh (or at its deadline),
//     not pushed by a keep-alive stream as a lock's is.
//   - A permit asked, or a waiter's place, whose lease etcd granted but
//     whose answer was lost holds nothing and lapses within its TTL; an
//     entry created by hand (etcdctl put) with the limit as its value takes
//     a place in line, and one deleted by hand is noticed at its permit's
//     next refresh (or its release, which reports the permit lost). Its
//     slot's key, on the same lease, stays until then: an asker admitted
//     meanwhile, with every other slot taken, fails with an error matching
//     distlock.ErrUnavailable ("no free slot") rather than take the slot
//     of a holder that may still be using it.
//
// # Durability
//
// Tokens and exclusion, of locks, shared locks and permits alike, and the
// stored limit, rest on the cluster's replicated log: it must be durable. An etcd
// restored from an older backup, or a single member whose data directory
// was lost, forgets keys and can hand out revisions (tokens) again.
//
// # Waiting
//
// A waiter watches only the key just before its own (the Mutex recipe),
// so a release wakes one waiter. Same-key acquires through one Backend wait
// in this process, first come first served, and only the first of them has
// a key in etcd: Mutex keys are per session, and two waiters of one session
// would share a key and both believe they hold the lock.
//
// Neither tries nor blocking acquires use the Mutex's methods: they create
// their key with the Mutex's transaction and layout, a try without
// abandoning that transaction when its context ends (Mutex.TryLock does;
// see above), and a blocking acquire waits in its own way, because of how
// etcd serves the Mutex's watch.
// Mutex.Lock reads the key before its own, then watches it from the
// revision of that read. etcd registers a watch that starts at or before
// its current revision among its "unsynced" watchers, which a server loop
// catches up every 100ms, so a predecessor released before the catch-up is
// seen up to 100ms late: across processes, the p99 of hand-offs was that
// tail. This package watches from the revision after the read, which etcd
// registers among its synced watchers at once, unless a write came between
// the read and the watch (etcd's answer to the watch's creation tells):
// then it reads again and watches again, at most three times in a row,
// after which it keeps the last watch. It also folds the Mutex's reads:
// the transaction that creates the key returns the predecessor, and after
// a wake-up one transaction reads the next predecessor and checks that our
// key still exists. A wait and its grant cost three requests (Mutex.Lock:
// five). With 16 waiters in separate Clients taking turns on one key (one
// local etcd 3.4, a busy 2-core machine, interleaved runs), from a release
// to the next grant: p50 1.5-1.6ms and p99 7.5-10ms, against 1.9-2.5ms
// and 51-52ms with Mutex.Lock.
//
// A wait whose context ends leaves no watch in etcd. The etcd client asks
// etcd to cancel a watch only once etcd has answered its creation (before
// that it does not know the watch's id), and a watch it abandoned earlier
// stays in etcd until an event on its key reaches it. So a wait cancelled
// while its watch is being created returns when etcd has answered, or
// after the request timeout (WithRequestTimeout) if etcd does not answer.
//
// A reader waits as a lock does, from the revision after its read and
// with the same guards, for the last key before its own that is not a
// reader's (a writer, holding or waiting); when that key goes it reads
// again, and is granted when no such key is left. The transaction that
// creates its key reads every key before it (keys only), and so does each
// read after a wake-up: a reader's request grows with the readers before
// it. A writer waits for the key just before its own, a reader's or not,
// as above: a release of the last reader before it wakes it. Readers'
// keys are named apart (see Key layout and etcdctl), so that the readers
// of one session, unlike its locks, each have a key in etcd, and wait in
// etcd without queueing in this process behind each other. But an
// exclusive acquire of the name through this Backend keeps the name's
// turn from before its key is created until its grant ends, and the
// Backend counts such acquires under way (asked, not yet returned): a
// reader asked while one is under way waits for the turn, creates its
// key as soon as it has it, then passes the turn on; a reader asked while
// none is, whoever has the turn (a reader creating its key, a granted
// lock, a clean-up), creates its key at once and finds in etcd any
// writer's key before it. So a reader never overtakes an exclusive asker
// of its own process that came first, and a reader's try fails only
// while such an asker is under way (waiting for the turn or in etcd, or
// creating its key) or when a key that is not a reader's was created in
// etcd before the try's own (a writer holding or waiting anywhere, or a
// writer's key that a clean-up has not deleted yet). A
// reader whose wait ends (cancelled, or its session lost) deletes its
// key, as a lock's waiter does.
//
// A permit's asker waits as a lock's does, from the revision after its
// read and with the same guards, but for other things: while more than
// the limit entries were created before its own, it watches the entry just
// before its own, which wakes it when that entry is granted (written
// again) or goes; once exactly the limit are before it (it is the first
// waiter), it watches the deletions of the semaphore's entries, ignoring
// those created after its own. A permit given back, in whatever order,
// so wakes the first waiter alone, and its grant wakes the waiter after
// it, which becomes first. While it waits, an asker keeps its entry's
// lease alive with a concurrency.Session, which it orphans once granted;
// a waiter that gives up (or fails) revokes its lease, deleting its entry
// and giving back a permit granted to it as it left; a waiter that dies
// loses its place when its lease lapses, within its TTL. Waiters are
// served in the order etcd created their entries, within a process and
// across processes; a try (no wait) is refused while the limit entries
// are before its own, waiters included.
//
// distlock's Client.Watch, and so an election's Observe, is woken by an
// etcd watch of every key under the lock name (WatchHolder), which starts
// at etcd's current revision (registered synced) and requires a leader: a
// grant, a release, an expired or revoked lease and a new value each wake
// it, and it reads the holder again.
//
// # Fencing
//
// A lock's token is the create revision of its etcd key. Revisions are
// etcd's single counter of changes, strictly increasing, never reused, and
// part of the replicated log: they survive restarts and leader changes. A
// key created later under a lock name is granted only after every earlier
// one is gone, so each grant's token is greater than every token granted
// before it for the name. `etcdctl lock NAME cmd` gives its command the
// same token, as ETCD_LOCK_REV.
//
// A shared lock's token is the create revision of its key, as a lock's.
// A writer's key is granted only once every key created before it,
// readers' included, is gone, and a reader's only once every writer's key
// before it is gone, so every grant's token is above that of every grant
// of the other kind before it, and a writer's above every earlier token
// of the name: a writer fences readers and writers before it. Readers
// waiting behind one writer are granted together when it goes; each
// learns of it on its own, so one may learn, and act, an instant before a
// reader with a smaller token. Their tokens are unique, and all below that
// of any later writer. A shared lock is not fenced by Fence (its Cmp
// refuses it): readers need no fence against each other.
//
// A permit's token is the revision of the transaction that granted it
// (see Permits), drawn when it is granted, not when it queued: so it is
// greater than every token granted before it for the key, a lock's or a
// permit's, and a permit's token is greater than every earlier token of
// its slot. Locks and permits share etcd's counter, but a lock's token is
// drawn when its key is created: a lock that waited while a permit of its
// key was granted has a smaller token than that permit. A register that
// admits both a key's locks and its permits can refuse such a lock; fence
// them apart (a lock of the semaphore's key is another grant).
//
// To let storage refuse a holder that lost its lock while paused, pass
// Lock.Token to it (see package fence), or, for data in the same etcd, use
// a Fence (NewFence), whose Txn, or Cmp in a transaction of your own, makes
// a transaction that etcd applies only if the lock key still exists with
// the lock's token as create revision.
//
// # Sessions
//
// A Backend keeps one concurrency.Session per distinct TTL and owner
// (distlock.WithOwner) it is asked for: one etcd lease and one keep-alive
// stream, shared by every lock with that TTL and owner, so a lock costs no
// lease of its own. Election candidates keep their value in their key,
// and share the session of their TTL with no owner. A Client has one owner, so a Backend shared by a few
// Clients keeps a few sessions per TTL. etcd counts lease TTLs in whole
// seconds: a TTL is rounded up, and etcd raises one below its minimum (1.5
// times the election timeout, rounded up to a second: 2s for default
// settings). The TTL etcd granted is the one reported in each Validity.
// Sessions live until they are lost or the Backend is closed; the ttl given
// to Refresh does not change a session's TTL. Permits are not in sessions:
// each has an etcd lease of its own (its TTL rounded up likewise), kept
// alive by a concurrency.Session while it waits and by its refreshes once
// granted, so that one abandoned permit lapses alone. Shared locks are in
// sessions, as locks: a reader's key is on the session lease of its TTL
// and owner.
//
// # Key layout and etcdctl
//
// The lock name of a key is the Backend's prefix (WithPrefix, default
// "distlock/") followed by the key with "%" written "%25" and "/" written
// "%2F" (see Backend.KeyPath), so that no lock's keys fall in another lock's range.
// The holder's and the waiters' keys are NAME + "/" + their session's lease
// ID in lowercase hex, with an empty value (an election candidate's holds
// its value: see Elections), as `etcdctl lock NAME` lays them out: an
// operator's
//
//	etcdctl lock 'distlock/reports%2Fnightly'
//
// and this package exclude each other. A reader's key (AcquireShared) is
// NAME + "/" + its session's lease ID in hex + ".shared." + a number the
// Backend gives each reader, with an empty value: in the Mutex's range,
// so that a Mutex waits for it as for any key created before its own,
// and with a last part no Mutex key has, so that readers know each
// other. So
//
//	etcdctl lock 'distlock/reports%2Fnightly'
//
// is a writer of the read/write lock "reports/nightly" (package rwlock):
// it waits for the readers and writers before it, and excludes readers
// and writers while it holds. distlock's readers and writers exclude it
// as they exclude each other; an older distlock, or any
// concurrency.Mutex, is a writer too. etcdctl has no reader; `etcdctl get
// --prefix 'distlock/reports%2Fnightly/'` lists the keys of a name, the
// holders and then the waiters by create revision, the readers' with
// ".shared." in their name. Holder reports the exclusive holder only (the
// key created first, if not a reader's), Readers the readers who hold
// (the readers' keys created before every other), and List both;
// WatchHolder wakes at readers' comings and goings too. Each session also
// writes its
// owner (distlock.WithOwner) to "<prefix>%00/<lease ID in hex>", attached
// to its lease, for List; sessions are per owner, so each lock is listed
// with the owner of the Client that took it.
//
// # Shared locks
//
// The read/write lock NAME of package rwlock is the key NAME itself: its
// writer is the key's ordinary lock (Acquire, `distlock run NAME`), its
// readers are shared locks (AcquireShared, `distlock run --shared NAME`),
// kept among the lock's keys (see Key layout and etcdctl). Who excludes
// whom, for the lock name N of a key:
//
//   - distlock's readers of N share it with each other, whichever
//     process or Backend asked;
//   - distlock's writers and ordinary locks of N, `etcdctl lock N`, any
//     concurrency.Mutex of N and an older distlock's locks of N each
//     exclude every reader and every other writer of N, and are excluded
//     by them;
//   - `etcdctl elect N` and distlock's election candidacies at N are
//     writers too (their keys are not readers'), so a read lock of an
//     election's key waits while it has a leader; elections and read
//     locks are not meant to share a key;
//   - permits of the semaphore at a key (Permits) neither exclude nor
//     are excluded by its locks or read locks.
//
// Askers are served in the order etcd created their keys, with the rule
// of driver.SharedLocks: a reader waits for the writers before it only,
// so that readers arriving together overlap, and a waiting writer keeps
// out every reader after it. Readers that ask through this Backend while
// an exclusive acquire of the same key is under way through it queue
// behind it first (see Waiting).
//
// # Permits
//
// The semaphore kept at a key (package semaphore: "semaphore/NAME") has,
// under the prefix P and the key's escaped name N (as in KeyPath):
//
//	P%00sem/N/<lease ID hex>   an entry: an asker's place in line, on an etcd
//	                           lease of its own; its value is the limit in
//	                           decimal; written a second time (version 2)
//	                           when its permit is granted
//	P%00slot/N/<slot>          the slot of a permit asked with slots, on the
//	                           permit's lease; its value is the entry's key
//	P%00/<lease ID hex>        the asker's owner, as a session's
//
// Entries rank by create revision: an entry with fewer than the limit
// entries created before it is admitted, and its asker claims its permit
// with one transaction that writes the entry again if it still exists,
// and creates the lowest free slot's key if that key does not exist. That
// transaction's revision, the entry's mod revision, is the permit's token.
// An entry is created only if every entry of the semaphore holds the
// limit asked for, or there is none (one transaction), so the limit is
// stored while any permit or waiter is, and a lease lapsing as an asker of
// another limit comes is either seen (the asker is refused) or gone (it
// sets the limit). Release revokes the permit's lease, which deletes its
// entry, slot and owner keys at once. No lock name starts with "%00", so
// locks and permits of a key neither collide nor exclude each other, and
// List shows locks only; Permits shows the permits. etcdctl has no
// semaphore, but an operator can read one:
//
//	etcdctl get --prefix 'distlock/%00sem/semaphore%2Fjobs/' -w json
//
// lists its entries: those of version 2 hold permits (their mod revision
// is the token), the others wait, in create revision order.
//
// # Elections
//
// Package election's terms are candidacies (distlock.WithElection), which
// the Backend keeps in the layout of concurrency.Election, at the lock
// name of the election's key (KeyPath(Election.Key()), for the election
// "payments/leader" by default "distlock/election%2Fpayments%2Fleader"):
// a candidate is the key NAME + "/" + its session's lease ID in lowercase
// hex, with the candidate's value as the key's value; the leader is the
// key created first, and the term, its fencing token, the key's create
// revision. So an operator's
//
//	etcdctl elect 'distlock/election%2Fpayments%2Fleader' 10.0.0.9:8080
//
// campaigns in the same election: it leads when distlock's leader
// resigns, and distlock's candidates wait while it leads; and
//
//	etcdctl elect -l 'distlock/election%2Fpayments%2Fleader'
//
// shows distlock's leader's value. Proclaim is
// concurrency.Election.Proclaim, which writes the new value only while the
// key keeps the term's create revision. Holder and List report a leader
// with its value, whoever elected it, and WatchHolder wakes Observe at
// each change.
//
// The layout is the lock layout's at the same name, with a value in the
// key: a lock of "election/payments/leader", and an older distlock that
// kept elections as locks, exclude the leader. Candidacies wait, resign
// and are lost as locks do, with the same guards: a candidate whose
// session ends while it waits gets an error, never a term (which
// concurrency.Election.Campaign does not ensure: it returns once the keys
// before its own are gone, even if its own went with its lease), and a
// resignation compares the key's create revision whenever an earlier
// attempt's reply was lost, so that its retry never deletes the session's
// next key at the same path (as a retried Mutex.Unlock does). Campaign
// does not wait in concurrency.Election.Campaign, whose watch etcd serves
// late as Mutex.Lock's (see Waiting), and whose clean-up after a
// cancelled wait is not bounded by a timeout.
//
// # URLs
//
// OpenURL opens a Backend with a client of its own from a URL, as the
// distlock CLI does:
//
//	etcd://h1:2379,h2:2379/myapp/locks/
//	etcds://h1:2379?ca=/etc/etcd/ca.pem&cert=/etc/etcd/client.pem&key=/etc/etcd/client-key.pem
//	etcd://user:password@h1:2379
//
// The user information runs to the last "@" of the URL, so a password is
// written as it is, and "@" in the prefix or the parameters as %40. Errors
// never show the password nor the user name: they show the URL redacted
// as backends.Redact does, the scheme alone when its hosts are not host
// names.
//
// OpenURL's client pauses at most about a second between two tries of a
// server it lost. gRPC's own pauses, which a client made with
// clientv3.New has unless told otherwise, start at a second and grow
// 1.6x a try to two minutes: after an outage of 30 s, the first request
// of such a client waited 13.5 s more. To bound them, pass
// grpc.WithConnectParams in clientv3.Config.DialOptions.
//
// # Goroutines
//
// A Backend runs one goroutine per session (besides the etcd client's own
// keep-alive and watch goroutines), short-lived ones for confirmations,
// one per key it is still deleting or permit lease it is still revoking
// (see above; a reader's key too), one per WatchHolder until its context
// ends, and one per waiting permit's session; Close stops them all.
// An Acquire waits in its caller's goroutine. The Backend and its leases
// are safe for concurrent use.
package etcdlock
