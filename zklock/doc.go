// Package zklock is a driver.Backend over ZooKeeper, with the lock recipe
// and node layout of Apache Curator's InterProcessMutex, so that this
// package and Curator's locks exclude each other on the same paths.
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
// their request was sent: a grant's Validity is the session timeout the
// ensemble granted, from the send time of the listing that found our node
// first while the session that owns it was current; a Refresh sends one
// read of the node and reports the same from its send time. The ensemble cannot expire
// the session before that time plus the session timeout, since it heard
// from the client after it. When the connection breaks (Curator's
// SUSPENDED state), refreshes fail, and the Client cancels the lock's
// context at the last confirmation plus the session timeout×(1−drift) −
// margin, a safe window shorter than the session timeout, unless the
// connection came back, with the session, within it. The zk client keeps
// the session alive with pings meanwhile: refreshes only confirm it.
//
// distlock's TTL does not set the lease: the session timeout does, once per
// Backend (WithSessionTimeout), and Refresh's ttl is only checked. The TTL
// in each Validity is the timeout the ensemble granted, which may be less
// than was asked for (servers clamp it to between 2 and 20 ticks unless
// configured otherwise).
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
// # Not guaranteed
//
//   - Nothing stops a process that pauses for longer than its lock's
//     usable validity from acting after the lock was lost: use the fence.
//   - Clock rates that differ by more than the drift allowed for.
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
//     nobody.
//   - A watch set on a predecessor by an acquire that gave up stays in the
//     server until that node goes: the zk client cannot remove watches.
//   - Fairness between acquires: ZooKeeper's order of node creation
//     applies, within a process as between processes.
//
// # Durability
//
// Exclusion and tokens rest on the ensemble's transaction log: it must be
// written to disk before it is acknowledged (ZooKeeper's default,
// forceSync=yes), and a server must never come back with an older data
// directory. An ensemble restored from a backup forgets nodes and can hand
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
// at once, and the waiter lists again. A release therefore wakes exactly
// one waiter, however many wait. No polling is needed: ZooKeeper delivers
// every watch event of a live session, and a session's end is reported. The
// order is the order of the nodes' sequence numbers, the same for acquires
// of one Backend as for acquires of different processes.
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
// To let storage refuse a holder that lost its lock while paused, pass
// Lock.Token to it (see package fence). The package offers no check inside
// ZooKeeper itself.
//
// # Sessions
//
// A Backend has one ZooKeeper session, shared by all its locks: a lock costs
// one node, no session of its own. The session timeout is asked for with
// WithSessionTimeout (default 10s). Close ends the session, which deletes
// every node it has.
//
// # Why New takes addresses
//
// The other backends' New takes the caller's client; this one takes the
// ensemble's addresses and makes its own connection, because go-zookeeper
// lets only the code that calls zk.Connect see what the safety model needs:
//
//   - the session timeout the ensemble granted, which is the TTL of every
//     Validity, is kept private by the *zk.Conn; the Backend reads it from
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
// SetOwner wakes. Each event costs two requests that set the watches
// again, and wakes the watcher, which reads again: waiters coming and
// going wake it too, for nothing. The zk client sets the watches again
// after a reconnection, and the ensemble then reports what changed
// meanwhile. The ensemble keeps a watch until it fires, even after its
// watcher stopped watching.
//
// SetOwner (Lock.SetOwner, an election's Proclaim) replaces the data of
// the lease's node, version-checked: it reads the node's stat, checks that
// the node is still the grant's (its czxid is the token, its owner the
// lease's session), and writes at the version read, again if the version
// changed meanwhile. Curator's LeaderLatch layout is not used: an
// election is a lock of this layout (see package election).
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
// node named "_c_<uuid>-lock-<sequence>", as Curator names them: the UUID
// is a random one in its canonical 36-character form, which lets a create
// whose reply was lost be found again. Nodes are ordered by the text after
// the last "lock-", as Curator orders them; a node's data is the holder's
// owner (distlock.WithOwner), or the host name. An operator sees the queue
// with
//
//	zkCli.sh -server zk1:2181 ls /distlock/reports%2Fnightly
//
// and Curator's InterProcessMutex on the path "/distlock/reports%2Fnightly"
// excludes this package's locks and is excluded by them.
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
