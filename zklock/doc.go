// Package zklock is a driver.Backend over ZooKeeper, with the lock recipe
// and node layout of Apache Curator's InterProcessMutex, so that this
// package and Curator's locks exclude each other on the same paths,
// package election's elections in the layout of Curator's LeaderLatch, so
// that LeaderLatch participants take part in them (see Elections), and
// package semaphore's permits in the layout of Curator's
// InterProcessSemaphoreV2, so that its leases and these permits count
// against one limit (see Semaphores), and package rwlock's shared (read)
// locks and writers in the layout of Curator's InterProcessReadWriteLock,
// so that its read and write locks take part (see Shared locks).
//
//	backend, _ := zklock.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"})
//	defer backend.Close()
//	locks, _ := distlock.New(backend)
//	lock, err := locks.Acquire(ctx, "reports/nightly")
//
// # Guarantees
//
// An acquire creates an ephemeral sequential node under the lock's path;
// the lock belongs to the first node in sequence order. What ZooKeeper
// promises is that an ephemeral node exists until it is deleted or its
// session ends, and that a session ends only after the ensemble heard
// nothing from its client for the session timeout. So while our node exists
// nobody else holds the lock.
//
// The Backend reports to distlock's Client confirmations timed from before
// their request was sent, and each confirmation goes through the leader:
// the leader alone expires sessions, and a follower cut off from it (a
// partition between servers) goes on answering its clients' reads and
// pings from its own state, for up to syncLimit × tickTime, while the
// leader, hearing nothing of their sessions, expires them and deletes
// their nodes. A grant is confirmed by the create of our node, when the
// listing that found it first followed the create (an uncontended
// acquire), or else by a sync sent just before that listing; a Refresh
// sends a sync and the read of the node. The request after a sync goes
// out as soon as the sync is written: ZooKeeper serves a session's
// requests in order, so it is answered after the sync, from the
// ensemble's state as of the sync, and the two take one round trip. The leader commits a create, and forwards a
// sync's answer, only after every change it made before, the end of our
// session included, and the server that answers us applies them in that
// order and drops our connection when it applies our session's end: an
// answered confirmation shows that the leader had not expired the session
// when the request reached it, after its send time.
//
// The Validity then runs from that send time for five twelfths of the
// session timeout the ensemble granted: the leader expires a session a
// session timeout after it last heard of it, and it hears of a client of
// a follower late, from the follower's answers to its pings, every half
// tick (at most a quarter of the timeout, since servers grant at least
// two ticks unless their minSessionTimeout says otherwise), and perhaps
// only of the request before the confirming one: the zk client pings
// every third of the timeout. (A follower's own requests to the leader,
// our sync among them, do not tell it of the session.) When the
// connection breaks (Curator's SUSPENDED state),
// refreshes fail, and the Client cancels the lock's context at the last
// confirmation plus that validity×(1−drift) − margin, unless the
// connection came back, with the session, within it. The zk client keeps
// the session alive with pings meanwhile: refreshes only confirm it.
// When a connection drops, the Backend has the zk client try the servers
// again at once, the one it was connected to included, and pause a
// second once a round of tries failed (every server, or two tries with a
// single server) or three tries (one per server, if more) began within
// the last second. A request made meanwhile waits for the next
// connection; the zk client fails it at the next pause, and the Backend
// then reports ErrUnavailable or, where it must learn what a request
// did, tries again until the request timeout. The zk client on its own
// paused a second before it tried the last server again, so that with a
// single server two dropped connections took 2 s of the 2.08 s that a
// confirmation holds with a session timeout of 5 s.
//
// distlock's TTL does not set the lease: the session timeout does, once per
// Backend (WithSessionTimeout), and Refresh's ttl is only checked. The TTL
// in each Validity is five twelfths of the timeout the ensemble granted,
// which may be less than was asked for (servers clamp it to between 2 and
// 20 ticks unless configured otherwise).
//
// A lock is also lost, and its holder told through OnLost, as soon as the
// Backend learns it: the ensemble reports the session expired (Curator's
// LOST state), a new session begins, or a Refresh finds the node deleted or
// another's. A session that ends loses all its locks; later acquires use
// the next session, which the zk client opens by itself. Before reporting a
// grant the Backend checks that the node's ephemeral owner is the current
// session, so that a node of a session that expired while the acquire
// waited is never reported held. The owner needs no read: the create was
// sent while that session was current and answered while it still was,
// and sessions never come back, so it ran in that session. Likewise a create whose reply was lost is
// looked for by its node's protected name: only a node the current session
// owns is taken for ours, and any other with that name (one of an earlier
// session, which a server may still show) is deleted, and the create
// redone if none is ours. Such a create may still be applied later (the
// server that answered the search may not have had it yet): a node with
// our protected name other than ours is deleted by each listing of the
// acquire that shows it, and looked for again at the release. A waiter
// whose session ends gets an error matching distlock.ErrUnavailable and
// ErrSessionLost, never the lock.
//
// A permit is held as a lock is, its lease node in place of the lock
// node: the same validity, refreshes, loss and release. Among the clients
// of a semaphore that name the same limit, this package's and Curator's
// InterProcessSemaphoreV2 alike, no more permits are live at once than
// the limit: a permit is granted only to the holder of the semaphore's
// mutex, which counted fewer live lease nodes than the limit, and lease
// nodes are created by the mutex's holder only.
//
// A shared grant is held as a lock is, its "__READ__" node in place of
// the lock node: the same validity, refreshes, loss and release. While it
// is valid no exclusive grant of the key is held, this package's locks,
// candidacies and writers, and Curator's write locks: a shared grant is
// granted only when no exclusive node is ahead of its node, and an
// exclusive grant only when its node is first, reader nodes included.
// Curator's InterProcessMutex and LeaderLatch are the exceptions: they do
// not see readers' nodes (see Shared locks for which of Curator's clients
// see which), and neither do releases of this package from before shared
// locks, whose locks sort "__READ__" and "__WRIT__" nodes after their own:
// take shared locks or writers of a key only once every process that
// locks it runs this release.
//
// # Not guaranteed
//
//   - Nothing stops a process that pauses for longer than its lock's
//     usable validity from acting after the lock was lost: use the fence.
//   - Clock rates that differ by more than the drift allowed for.
//   - A link between a follower and its leader that stops carrying the
//     follower's answers to the leader's pings while it carries our
//     confirmation (one way: the leader's messages stall while the
//     follower's flow, or the link flaps around the confirmation). The
//     leader then stops hearing of the session before the confirmation
//     that the validity counts from: a follower keeps serving for up to
//     syncLimit × tickTime without hearing from its leader, so the
//     validity holds in that case only when (syncLimit + ½) × tickTime is
//     at most a quarter of the session timeout, which ZooKeeper's defaults
//     (tickTime 2s, syncLimit 5) do not give. A partition that cuts both
//     ways (the nemesis mode's) is covered: the confirmation does not
//     reach the leader. A servers' minSessionTimeout below two ticks
//     widens the lag too. The fence refuses a stale holder's writes
//     either way.
//   - A node deleted by an operator ends the lock for this holder only at
//     its next Refresh (the Client's renewals); meanwhile the next in line
//     may already hold it. Held nodes are not watched, so that a lock costs
//     the ensemble what Curator's does: a create, a listing and a delete.
//   - A failed or cancelled acquire deletes the node it created, or may
//     have created (a create whose reply was lost is found by its protected
//     name), before returning, and a release deletes its node, unless
//     ZooKeeper does not answer within the request timeout. A goroutine
//     then goes on deleting the node, with random pauses of up to 100ms,
//     doubling up to 2s, until ZooKeeper confirms it gone, its session ends
//     or the Backend is closed. Until then the node may hold the lock for
//     nobody. After a create whose reply was lost, every node with the
//     acquire's protected name is deleted. A permit's acquire whose lease
//     create lost its reply also syncs the server it reads from with the
//     leader and lists the leases again before it gives the mutex back,
//     deleting any other lease node with its protected name; a create
//     applied later still (the server that took it had not passed it on)
//     counts against the limit until the permit's release sweeps it, or
//     its session ends.
//   - A watch set on a predecessor by an acquire that gave up stays in the
//     server until that node goes: the zk client cannot remove watches.
//     So does the children watch on a semaphore's leases set by a waiter
//     that held the mutex and gave up: it stays in the server, and in the
//     zk client, until the leases next change (a permit is granted or
//     given back) or the session ends.
//   - Fairness between acquires: ZooKeeper's order of node creation
//     applies, within a process as between processes.
//   - Clients that name different limits for one semaphore are not
//     detected, two clients of this package included: no acquire ever
//     fails with a *driver.LimitError. The limit is not stored, since
//     Curator's layout has no place for it; it holds only among clients
//     that name the same one, and one that names a greater limit is
//     granted a permit while as many as the smaller are live. Permits
//     reports driver.UnknownLimit. The layout was kept as Curator's so
//     that a JVM and a Go process share one semaphore and one line: a
//     limit stored where only this package reads it would refuse a
//     mismatch between Go clients alone, and would let a Curator client
//     with another limit pass unseen all the same.
//   - A lock of a semaphore's key granted after a permit of it may have a
//     smaller token than the permit: a lock's token is drawn when it
//     queues (see Fencing). Locks and permits of one key must not share
//     one fence; package semaphore keeps its permits at the key
//     semaphore/NAME, where no lock of the application goes.
//   - Permits name no slots: a permit asked with them is refused with an
//     error matching errors.ErrUnsupported.
//   - A try of a permit fails while the semaphore's mutex is held, by a
//     waiter, or by an acquirer that is about to be granted a permit and
//     has not yet given the mutex back.
//   - A mutex or lease node deleted by an operator: the next in line may
//     then count and be granted while an earlier holder still counts or
//     holds, and the holder of a lease node learns of it at its next
//     Refresh.
//   - Exclusion between Curator's recipes and this package's grants that
//     the recipe does not see: Curator's read lock does not see a plain
//     lock's "-lock-" node, nor Curator's InterProcessMutex a shared
//     grant's or a writer's node, nor Curator's write lock a "-lock-"
//     node (see Shared locks for the whole table). Writers that must
//     exclude Curator's readers ask with AcquireOptions.Writer (package
//     rwlock's Lock does).
//   - The order in which readers that may hold together learn of their
//     grant: two readers waiting for one writer are both granted when it
//     goes, and the one with the greater token may return first.
//
// # Durability
//
// Exclusion (shared grants' and writers' too), the limit of permits and
// tokens rest on the ensemble's
// transaction log: it must be written to disk before it is acknowledged
// (ZooKeeper's default, forceSync=yes), and a server must never come back
// with an older data directory. An ensemble restored from a backup forgets nodes and can hand
// out zxids (tokens) again.
//
// # Waiting
//
// An acquire sends its first listing right behind its create, once the
// create is written and without waiting for its reply: ZooKeeper answers
// one session's requests in the order they were sent, so the listing runs
// after the create and shows our node, and an uncontended acquire costs
// one round trip. A listing that does not show our node (it failed, or ran
// on another connection than the create) is not taken for the node's
// deletion: the acquire lists again once the create is answered.
//
// A waiter watches only the node just before its own, with a data watch
// set by a read (getData), which ZooKeeper does not set on a node that is
// gone: a predecessor that went between the listing and the watch is seen
// at once, and the waiter lists again. Each listing after the first goes
// out behind a sync (see above), which confirms the grant when the
// listing shows our node first. A release therefore wakes exactly
// one waiter, however many wait. No polling is needed: ZooKeeper delivers
// every watch event of a live session, and a session's end is reported. The
// order is the order of the nodes' sequence numbers, the same for acquires
// of one Backend as for acquires of different processes.
//
// A shared grant's acquire waits as a lock's does, but for the last
// exclusive node ahead of its own (a lock's, a candidacy's or a writer's,
// holding or waiting), with the same data watch: readers ahead of it do
// not hold it up, and a writer that waits holds up every reader behind
// it, so that readers never starve a writer. A lock's or a writer's
// acquire waits for the node just before its own, a reader's too. A
// release of a writer wakes the readers just behind it, each of which
// watched it; a release of a reader wakes the writer just behind it, if
// that one watched it. Readers, writers and locks of one path are served
// in the order of their nodes' sequence numbers, one counter for every
// kind.
//
// A permit's acquire waits first for the semaphore's mutex, as a lock's
// does, so waiters are served in the order of their mutex nodes; then, as
// the mutex's holder, for fewer live lease nodes than the limit, with a
// children watch on the leases, which only the mutex's holder sets: a
// permit given back wakes that one waiter, and every other waiter watches
// only the mutex node before its own. A count or a lease create that
// fails for a reason that may pass (no answer within the request timeout,
// a broken connection) is tried again after a pause, as a lock's waiter
// lists again, while the mutex's session lives; a try reports it.
//
// # Fencing
//
// A lock's token is the czxid of its node: the zxid of the transaction that
// created it, which ZooKeeper puts in the header of the create's reply (the
// Backend reads it there, as the reply goes by, and reads the node only
// when it could not). Zxids number every change the ensemble makes, in one total
// order, 64 bits wide (the leader's epoch, then a counter), and they
// survive restarts and leader changes. A node is first in its lock's queue
// only after every node created before it is gone, so each grant's token is
// greater than every token granted before it for the lock. The node's
// sequence number would not do: it is 32 bits, counted per parent, and
// starts again at 0 when the parent container is deleted and recreated.
//
// A permit's token is the czxid of its lease node, which this package
// creates only once it holds the semaphore's mutex and counted fewer
// lease nodes than the limit: the create is the grant, and its zxid is
// greater than every permit's and every lock's of the key granted before
// it. Curator's InterProcessSemaphoreV2 creates its lease node before it
// counts, and waits with it, so the czxid of a Curator lease is drawn
// when it queues: a lock of the key granted while a Curator waiter waits
// has a greater one. It is greater than every earlier permit's all the
// same, since only the mutex's holder creates lease nodes.
//
// The converse does not hold: a lock's token is the czxid of the node it
// queued with, so a lock of a semaphore's key granted after a permit that
// was granted while the lock waited has the smaller token. Locks and
// permits of one key must not fence one resource with one fence (package
// semaphore keeps permits at semaphore/NAME, where no lock of the
// application goes).
//
// A shared grant's token is the czxid of its "__READ__" node, as a
// lock's. A reader is granted only once every exclusive node created
// before its own is gone, and an exclusive grant only once every node
// created before its own is gone, readers' included: every grant's token
// is greater than that of every exclusive grant before it, and a writer's
// or a lock's greater than that of every grant before it, shared or not,
// so that a writer's token fences as a lock's does. Readers holding at
// once have distinct tokens; two granted by one writer's release may
// return in either order.
//
// To let storage refuse a holder that lost its lock while paused, pass
// Lock.Token to it (see package fence). The package offers no check inside
// ZooKeeper itself.
//
// # Sessions
//
// A Backend has one ZooKeeper session, shared by all its locks, shared
// grants and permits: a lock or a shared grant costs one node, a permit a lease node (and a mutex node
// while it waits), no session of their own. The session timeout is asked for with
// WithSessionTimeout (default 10s). Close ends the session, which deletes
// every node it has.
//
// # Why New takes addresses
//
// The other backends' New takes the caller's client; this one takes the
// ensemble's addresses and makes its own connection, because go-zookeeper
// lets only the code that calls zk.Connect see what the safety model needs:
//
//   - the session timeout the ensemble granted, from which the TTL of every
//     Validity is counted, is kept private by the *zk.Conn; the Backend reads it from
//     the connect reply through its own dialer (zk.WithDialer);
//   - session expiry, which must end every lock of the session, is an
//     event delivered to the callback given to zk.Connect, or to the event
//     channel zk.Connect returns to its caller (who must drain it); a Conn
//     made elsewhere gives the Backend neither, short of polling State;
//   - a lock's token is its node's czxid, which the same dialer reads from
//     the reply to the create, so that a grant needs no read of its node.
//
// The first two are the safety model itself: a Backend that could not see
// them could not end its locks before the ensemble may grant them again.
//
// Conn returns the connection for data the application keeps beside its
// locks; closing it ends the Backend's session.
//
// # Holder and watch
//
// Holder (a Client's Holder, an election's Leader) reads as List does, one
// lock path only ("svc/leader" is never "svc/leader2"): its children, then
// the data and stat of the first of them in Curator's order, two requests
// or more when nodes go meanwhile. Token is the node's czxid, Owner its
// data, Expires zero (a holder's session timeout is not visible to other
// sessions).
//
// WatchHolder (a Client's Watch, an election's Observe) is woken by
// ZooKeeper, not by polling: a watch on the children of the lock path (a
// grant or release creates or deletes a node there, and so does the
// ensemble when a holder's session expires), or on the creation of the
// path while it does not exist, and a data watch on its first node, which
// SetOwner wakes. Each event costs a listing of the path, which sets its
// watch again if that one fired, and a read that sets the data watch of
// the first node if it fired or the first node changed; then it wakes the
// watcher, which reads again: waiters coming and going wake it too, for
// nothing. A watch is set again only once it fired, since the zk client
// keeps every watch set until its event, however many were set on the
// same node. The zk client sets the watches again after a reconnection,
// and the ensemble then reports what changed meanwhile. The ensemble keeps
// a watch until it fires, even after its watcher stopped watching.
//
// SetOwner (Lock.SetOwner, an election's Proclaim) replaces the data of
// the lease's node, version-checked: it reads the node's stat, checks that
// the node is still the grant's (its czxid is the token, its owner the
// lease's session), and writes at the version read, again if the version
// changed meanwhile.
//
// # Node layout and zkCli.sh
//
// The lock of a key is the path Backend.KeyPath(key): the prefix
// (WithPrefix, default "/distlock"), "/", then the key with "%", "/", a
// leading "." and the characters ZooKeeper refuses in paths percent-escaped,
// so that distinct keys never share a path and no key reaches outside the
// prefix. The prefix and the lock paths are created as container nodes,
// which the ensemble deletes when their last child is gone, or as
// persistent nodes on servers older than 3.5.
//
// Under a lock's path each acquire creates a protected ephemeral sequential
// node named "_c_<uuid>-lock-<sequence>", as Curator names them, or
// "_c_<uuid>-latch-<sequence>" for an election's candidacy (see
// Elections), "_c_<uuid>-__READ__<sequence>" for a shared grant and
// "_c_<uuid>-__WRIT__<sequence>" for a writer (see Shared locks): the
// UUID is a random one in its canonical 36-character form, which lets a
// create whose reply was lost be found again. Nodes are ordered by their
// sequence, the text after the last "lock-", "latch-", "__READ__" or
// "__WRIT__", as Curator orders the nodes of each kind; a lock node's
// data is the holder's owner (distlock.WithOwner), or the host name. An
// operator sees the queue with
//
//	zkCli.sh -server zk1:2181 ls /distlock/reports%2Fnightly
//
// and Curator's InterProcessMutex on the path "/distlock/reports%2Fnightly"
// excludes this package's locks and is excluded by them.
//
// # Elections
//
// Package election's terms are candidacies (distlock.WithElection), which
// the Backend keeps in the layout of Curator's LeaderLatch, at the lock
// path of the election's key (KeyPath(Election.Key()), for the election
// "payments/leader" by default "/distlock/election%2Fpayments%2Fleader"):
// a candidate is a protected ephemeral sequential node named
// "_c_<uuid>-latch-<sequence>", whose data is the candidate's value (the
// participant id of a LeaderLatch, in UTF-8); the leader is the first
// node in sequence order, and the term, its fencing token, the node's
// czxid, as for a lock (see Fencing). So Curator's
//
//	new LeaderLatch(client, "/distlock/election%2Fpayments%2Fleader", "10.0.0.9:8080")
//
// campaigns in the same election: it leads when distlock's leader
// resigns, and distlock's candidates wait while it leads; its getLeader
// and getParticipants read distlock's values, and Holder, List, an
// election's Leader and Observe report it, with its participant id as the
// value and its node's czxid as the term. Proclaim is SetOwner (see
// Holder and watch).
//
// Do not Proclaim in an election that LeaderLatch participants take part
// in: a LeaderLatch watches the node before its own for its deletion only,
// and a change of that node's data ends the watch without a new one being
// set, so the participant just behind a leader that proclaimed would not
// see the leader resign, and would stand first without leading (until a
// reconnection makes it list again), with every candidate behind it
// waiting.
//
// Locks and candidacies of the same path are ordered together by this
// package, by sequence (ZooKeeper numbers the sequential children of a
// path from one counter): a lock of "election/payments/leader" through
// this package and the leader exclude each other, and each term's token
// is greater than every earlier lock's and term's of the key. Curator's
// recipes do not order the two kinds together: InterProcessMutex orders
// its "-lock-" nodes and puts every "-latch-" node after them, and
// LeaderLatch does the reverse, so a Curator lock on an election's path
// is granted while a leader leads, and a LeaderLatch participant leads
// while a lock of the key is held, if the other's node came first. The
// same holds for releases of this package that kept elections as locks of
// "-lock-" nodes: a candidate of such a release that campaigns while a
// leader of this one leads is elected too. Stop the candidates of an
// older release before those of this one campaign, and keep Curator's
// locks off elections' paths. A path of its own would not be safer: it
// would separate the two kinds always, where sharing the path keeps this
// package's locks and candidacies, and LeaderLatch participants and this
// package's candidates, excluding each other.
//
// Candidacies wait, resign and are lost as locks do, with the same
// guards. A term is granted only once the node's ephemeral owner is the
// current session, so that the node of a session that ended is never a
// term (a LeaderLatch took it for one until CURATOR-696: two leaders
// after a session expiry). A reconnection within the session changes
// nothing: the node, and the term, outlive it, and the term ends only as
// a lock does (the session's expiry, or the Client's deadline when
// renewals fail for the safe window). LeaderLatch answered reconnections
// by listing again, and for a time by deleting and creating its node
// again, racing the listings of the previous answer: two leaders after two
// quick reconnections (apache/curator#1024, #1160).
//
// # Shared locks
//
// Package rwlock's read/write lock of a key lives at the key's lock path,
// in the layout of Curator's InterProcessReadWriteLock
// (KeyPath("catalog"), by default "/distlock/catalog"):
//
//   - a shared grant (AcquireShared, rwlock's RLock) is a protected
//     ephemeral sequential node "_c_<uuid>-__READ__<sequence>", Curator's
//     read lock's name, whose data is the owner; it is granted when no
//     exclusive node (any but a "__READ__" node) is ahead of it, holding
//     or waiting;
//   - a writer (AcquireOptions.Writer, rwlock's Lock) is a node
//     "_c_<uuid>-__WRIT__<sequence>", Curator's write lock's name, and an
//     ordinary lock of the key (Acquire, `distlock run catalog`) a
//     "-lock-" node; either is granted when it is first, so it waits for
//     the readers and writers ahead of it.
//
// Holder, List's exclusive entry and WatchHolder report the first node
// unless it is a reader's; Readers, and List with Shared set, the reader
// nodes ahead of the first exclusive node, Curator's too, by token. So
// Curator's
//
//	new InterProcessReadWriteLock(client, "/distlock/catalog")
//
// and package rwlock's
//
//	rwlock.New(client, "catalog")
//
// share the lock, in one queue. Curator's recipes see fewer kinds than
// this package does, since each orders the others' nodes after its own
// (see Node layout): Curator's read lock waits only for "__WRIT__" nodes
// ahead of it, its write lock for "__READ__" and "__WRIT__" nodes, and
// InterProcessMutex for "-lock-" nodes. Which clients exclude which, on
// one path:
//
//   - this package's reader and writer (Writer) against Curator's read and
//     write locks: all exclude each other as a read/write lock's do, and
//     readers share;
//   - this package's plain lock ("-lock-") against Curator's read lock:
//     the lock waits for Curator's readers ahead of it, but Curator's read
//     lock does not see the lock's node and is granted while it holds;
//     against Curator's write lock: the lock waits for it, but Curator's
//     write lock does not see the lock's node either;
//   - Curator's InterProcessMutex against this package's reader and
//     writer: ours wait for its "-lock-" node, but it does not see theirs
//     and is granted while they hold;
//   - Curator's InterProcessMutex against Curator's read/write lock:
//     neither sees the other;
//   - Curator's LeaderLatch against this package's reader and writer: ours
//     wait for its "-latch-" node, but it does not see theirs and leads
//     while they hold.
//
// Readers and List report readers as this package orders the queue: a
// Curator read lock granted behind this package's plain lock (which it
// does not see) is not listed.
//
// So where Java services use InterProcessReadWriteLock on a path, this
// package's writers of it must ask as writers (rwlock's Lock, or
// distlock.WithWriter), not as plain locks; where they use
// InterProcessMutex, they must not take this package's shared locks of
// it.
//
// A reader re-entering under its own write lock, which Curator grants to
// the thread that holds the write lock, is the Client's re-entry here: a
// read asked under a write lock's context of the same key is that write
// lock. A shared grant and a writer are held, refreshed, released and
// lost as locks are, with the same clean-ups.
//
// # Semaphores
//
// Package semaphore's permits (the Semaphores of driver) are kept in the
// layout of Curator's InterProcessSemaphoreV2, at the lock path of the
// semaphore's key (KeyPath(semaphore.KeyPrefix+name), for the semaphore
// "pool" by default "/distlock/semaphore%2Fpool"):
//
//   - "locks" under it holds the semaphore's mutex, an InterProcessMutex:
//     protected ephemeral sequential nodes "_c_<uuid>-lock-<sequence>",
//     one per waiter, whose data is the owner, as a lock's (see Node
//     layout);
//   - "leases" under it holds a protected ephemeral sequential node
//     "_c_<uuid>-lease-<sequence>" per live permit, whose data is the
//     owner (Curator writes its client's default data, the host's
//     address).
//
// Both are container nodes, as the lock paths are. An acquire takes the
// mutex, counts the lease nodes, waits while there are as many as the
// limit (see Waiting), creates its lease node (the grant; see Fencing)
// and gives the mutex back, then or when it fails or is cancelled, with
// the clean-ups of a lock's acquire: a waiter that gives up deletes its
// mutex node, and a dead waiter's goes with its session. A release
// deletes the lease node. So Curator's
//
//	new InterProcessSemaphoreV2(client, "/distlock/semaphore%2Fpool", 4)
//
// and package semaphore's
//
//	semaphore.New(client, "pool", 4)
//
// share the semaphore: each waits while the other's holders have the
// limit, and they line up in one queue, that of the mutex. Permits lists
// the lease nodes, Curator's too, with their czxids as tokens and their
// data as owners, and counts the mutex nodes as waiters: a Curator
// waiter, which holds the mutex while it waits and has its lease node
// made already, is counted twice, among the holders (its lease node) and
// among the waiters (its mutex node), and an acquire about to give the
// mutex back among the waiters. A semaphore is no lock: Holder, List
// and WatchHolder skip its "leases" and "locks", and a lock of the same
// key, whose nodes sit beside them, neither excludes nor is excluded by
// permits.
//
// # URLs
//
// OpenURL opens a Backend from a URL, as the distlock CLI does:
//
//	zk://h1:2181,h2:2181,h3:2181/myapp/locks
//	zk://user:password@h1:2181?session_timeout=15s
//
// The user information runs to the last "@" of the URL, so a password is
// written as it is, and "@" in the prefix or the parameters as %40. Errors
// never show the password nor the user name: they show the URL redacted
// as driver.Redact does, the scheme alone when its hosts are not host
// names.
//
// # Goroutines
//
// A Backend runs the zk client's goroutines, one goroutine per request in
// flight (the zk client's calls take no context; the listing sent behind a
// create has its goroutine from the create's start, waiting for the create
// to be written), one per node it is still deleting (see above), and one
// per WatchHolder until its context ends; Close
// stops them all. The Backend and its
// leases are safe for concurrent use.
package zklock
