// Package redlock is a driver.Backend over N independent Redis servers
// (no replication between them; usually 3 or 5): a grant needs the votes
// of a majority, so that locks survive the loss of a minority of the
// servers, and every grant carries a fencing token that increases across
// grants although the servers share nothing. Use it where a single Redis
// is not available enough, with the tokens checked by the storage for
// correctness (see Fencing), on servers kept as Durability describes.
//
//	var nodes []redlock.Node
//	for _, addr := range []string{"r1:6379", "r2:6379", "r3:6379", "r4:6379", "r5:6379"} {
//		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
//	}
//	backend, err := redlock.New(nodes)
//	...
//	defer backend.Close()
//	client, _ := distlock.New(backend)
//	err = client.Do(ctx, "reports/daily", func(ctx context.Context) error { ... })
//
// # Guarantees
//
// A try is one round: the acquire script runs on every node in parallel,
// each request bounded by the per-node timeout (a tenth of the TTL by
// default, WithRequestTimeout). On each node it sets the lock key with SET PX
// to a value whose first field is the try's secret, random from
// crypto/rand (unguessable), unless another
// grant holds it, and increments the key's counter on that node,
// atomically. The try is granted when a majority of the nodes voted for it
// and validity remains: the TTL less the time since the first request was
// sent and the drift (TTL/100 + 2ms) is positive. Its Validity is the TTL
// from that first send: every node set its key after it, so each node
// keeps the grant at least that long by its own clock, and the Client's
// deadline (which takes the drift off again) comes before a majority
// could have expired it. While a majority holds the grant's value, nobody
// else can gather a majority for the key.
//
// A try that is not granted (held by others, a split vote, too few
// answers, validity used up) releases at once what it got, on every node
// that granted it or whose reply was lost, leaving a tombstone there so
// that a request still on its way does nothing when it arrives (the
// tombstone discipline of redislock). A node that could not be reached
// for that is cleaned up in the background until the grant would have
// lapsed anyway.
//
// Refresh extends the grant on every node in parallel and counts only
// when a majority extended it with validity left, from the send time of
// its first request. Release goes to every node: it succeeds once a
// majority released the grant (a release retried after a lost reply
// finds its tombstones and succeeds too), reports distlock.ErrLockLost
// when a majority no longer held it, and releases nodes that did not
// answer in the background. Both are owner-checked on every node: a
// holder whose lease lapsed never extends or deletes the next holder's
// keys. RefreshAll (driver.BatchRefresher, which the Client's watchdog
// uses) refreshes many grants with one request per node for up to 256
// of them, each counted as Refresh counts it.
//
// A refresh and a release return as soon as the replies so far decide
// them, without waiting for the slowest nodes (over three nodes or more):
// a refresh once a majority extended the grant or no longer holds it; a
// release once a majority released it or did not hold it. A try waits
// for every node to vote or time out, whatever the first votes say: a
// refusal returned before the last votes left them to grant the try late
// where the key was free, until a clean-up; the next tries met those
// nodes held or granted there with counters apart, a later grant's votes
// then disagreed and its token was raised, and Holder, reading a
// majority of its nodes before the raise, could report a token no lease
// has. A refused try cleans up the nodes that granted it, or whose reply
// was lost, before it returns. The requests of a refresh or a release
// that the others decided go on in the background, bounded by the
// per-node timeout but no longer by the caller's context (a caller that
// cancels once its call returned does not cut them short), and a release
// retries those that failed. Close waits for them for 2s at most.
// Validity counts from the first request of the round.
//
// A grant's secret (the first field of its lock value) stays out of what
// a hook on a node's client that logs or traces commands sees
// (cmd.String, redisotel, or cmd.Args() encoded by encoding/json,
// slog.JSONHandler or zap), on every request: the scripts get it as a
// redact.Secret argument (module internal/redis), which go-redis writes
// as its bytes and those renderings show as "[secret]"; tombstones are
// named by a digest of it (see the key layout), since Node takes keys as
// strings; and the lock values that Holder and List read come back with
// the secret replaced by its SHA-1. A Node that is not a go-redis client
// must write an encoding.BinaryMarshaler argument as its bytes. The
// secret reaches the servers: each node's lock value holds it, and its
// slow log, MONITOR, append-only file and replication stream carry it.
//
// Redis never reports that a grant is gone: OnLost is never called, and a
// holder learns of a loss from its next refresh or the Client's deadline.
// It survives the loss, pause or partition of a minority of the nodes,
// lost or delayed replies, and a node that restarts without its data (see
// Durability). Errors that involve too few nodes name each node that did
// not take part, and why.
//
// # Not guaranteed
//
//   - Process pauses of the holder longer than its remaining validity:
//     only the storage can stop a holder that wakes up late (see Fencing).
//   - Clock faults beyond the drift. Each node expires grants by its own
//     clock; a node whose clock jumps forward expires them early, and when
//     that node is part of the majority a second client can gather a
//     majority while the first still counts on its lock. Keep clocks
//     slewed, not stepped.
//   - A grant that nobody holds, for a moment. A try's requests delayed in
//     the network past the try's end (a partition that heals, a proxy that
//     held them) can still be granted on the nodes its clean-up had not
//     reached yet, a majority at worst. Until the background clean-up or
//     the TTL removes it, that grant keeps others out, and Holder (a
//     Client's Holder, an election's Leader and Observe) reports it, with
//     the owner and a token of a campaign that failed. Nobody writes with
//     that token.
//   - Keys changed by something else than this package (DEL, FLUSHALL,
//     eviction: set "maxmemory-policy noeviction" on every node).
//   - Availability while a majority of the nodes is down or waiting to be
//     re-seeded (no grants: safe, not live), and fairness between waiters.
//   - Secrecy of a grant's secret (the first field of its lock value)
//     beyond the clients' command logs (see the key layout): a node's
//     MONITOR and SLOWLOG show script arguments, its append-only file and
//     replication stream carry them, and its data (a GET of the lock key,
//     a dump) holds the value. Whoever reads the secret can refresh or
//     release the grant: keep these as private as the nodes themselves.
//
// # Durability
//
// Exclusion and tokens rest on what each node keeps. The package assumes
// that a node either keeps its lock keys and counters, or loses all of
// them together (a restart without persistence, a lost disk), and marks
// that event: every node carries a seed marker (key layout below), kept
// like the rest of its data. A node without the marker does not vote.
// What follows is written on the node itself, so that whichever client
// meets the node next acts on it, one that lives for a single lock (a
// distlock run) as well as one that lives for days:
//
//   - A round that finds a node without a marker, while another node has
//     one, marks its wait at once, in the node's clock: found empty at
//     time s, its counters may be copied from s + 1s + the drift
//     (1.012s), and it may vote from s + the longest TTL any Backend uses
//     (WithMaxTTL, default 5m) + its drift, once copied.
//   - The first round that finds it past its copy time copies onto it,
//     for every key, the highest counter read from a majority of the
//     nodes that have their counters (voting, or copied and waiting), and
//     marks it copied. A copy applies only to the wait its round saw: a
//     node that lost its data again since waits anew.
//   - The first try that finds it copied and past its vote time marks it
//     "ok" and counts its vote.
//
// A round leaves the marking and the copy to a background goroutine,
// which Close lets finish (2s at most): the holder of a grant does not
// wait for it, nor does a refused try, unless the nodes it may let vote
// could grant the try (a new deployment's first round, a copy onto a
// node whose wait is over), and then only until the try's context ends.
// A node restarted empty thus votes again the longest TTL and its drift
// after the first round that met it, provided rounds keep coming (any
// Backend's, however short-lived) and a majority of the nodes have their
// counters at its copy time. The vote time keeps exclusion: every grant
// the node forgot has expired on it by then. The copy time keeps tokens:
// a token is handed out only once a majority of the nodes reported a
// counter at least as high in one round, within a second of that round's
// first request (see Fencing), so every token that counted the node's
// old counter is settled by then on nodes that the copy reads. A
// deployment whose every node answers without a marker is new: its nodes
// vote at once (and a new deployment's "ok" takes back, for a second, a
// wait marked by a round that met its first marks before the others).
//
// Measured in this package's tests (three nodes, a lock with token 11
// held on two of them): the holder's node restarted empty does not vote,
// a second client is refused while the lock is held, and the next tokens
// are higher (12, then 13 and 14 once the node was re-seeded); marked
// seeded by hand right after its restart, the same node lets a second
// client in while the first holds the lock, with token 2. With a longest
// TTL of 2s, a node restarted empty under Backends that each live for one
// acquire and release votes again 2.05s after its restart.
//
// Rolling restarts. Nodes restarted empty one after another recover by
// themselves as long as no more than a minority of the nodes lack their
// counters at once (restarted and not yet copied): restart the next node
// once the last one's marker reads "c:" (copied, a little over a second
// after a round met it; it need not vote yet). With five nodes, two may
// be restarted at once. Grants stop while fewer than a majority vote
// (with three nodes, from the second restart until the first votes
// again, up to the longest TTL): availability, not safety.
//
// What the marker cannot see is a node that kept its marker but lost its
// latest writes: "appendonly yes" with "appendfsync everysec" can lose the
// last second of grants and counter increments in a crash, and the node
// then votes at once with a counter that is behind, which breaks the
// token argument below (and exclusion, when it forgot a grant still
// held). For monotonic tokens and exclusion across crashes, run every
// node either without persistence (its restarts are then total losses,
// which the marker handles, at the price of the wait) or with
// "appendonly yes" and "appendfsync always"; never with RDB snapshots
// alone or "appendfsync everysec". A majority of the nodes without their
// counters at once (lost and not yet copied: restarted closer together
// than Rolling restarts allows) is beyond any quorum: when every node
// restarted empty the deployment starts over (tokens restart at 1) for a
// Backend that never saw it vote, and stops for one that did; otherwise
// grants stop until an operator marks the waiting nodes seeded (SET
// <prefix>node:seed ok) and accepts that tokens may repeat.
//
// # Waiting
//
// Waiters queue on every node, and a release wakes one of them, not all
// (no herd: a hand-off costs the release's round and the woken waiter's
// round, whatever the number of waiters). Each try of a waiting Acquire
// that finds a node held puts the waiter in the key's queue on that node,
// a sorted set scored by a ticket that the waiter draws once from its
// clock, so that every node orders the same waiters the same way and
// every node's release wakes the same waiter. A release publishes the
// first waiter of each node it frees on that waiter's Backend's wake
// channel and takes it out of that queue; a woken waiter that does not
// win queues again with the same ticket, in the same place, and a
// grant, or the release of a waiter's grant, takes the waiter out. A
// woken waiter tries once the releases of a majority of the nodes have
// woken it (or 20ms after the first: the nodes' queues may differ), so
// that its try does not find the nodes still held that the release has
// not reached yet. A node that a release freed and that woke a waiter is
// kept for that waiter for a moment (the per-node timeout, at most
// 250ms): other tries are refused meanwhile, so that a try already on
// its way (the releaser's next Acquire, say) does not take it first and
// send the woken waiter back to wait. A queued waiter refused that way
// waits for its own turn, not for the reservation's end. Nothing renews
// a reservation (only a grant's release sets one), and the order only
// chooses whom to wake and whom to keep a node for, so no state of the
// queues blocks grants for long: where the nodes' queues disagree and
// reserve nodes for different woken waiters, each of those waiters tries
// again when the reservations end, and the jittered retries of split
// votes take over. Exclusion and tokens do not depend on the queue: a
// reservation only refuses. Waiters are served in about the order they
// came, not strictly: a newcomer may take a key nobody was woken for.
//
// Every Backend has one wake channel, subscribed on every node (one
// pub/sub connection per node for all its waiters) by its first waiting
// Acquire that finds a key held, which then tries again (a release before
// the subscription woke nobody); later waiting Acquire calls queue with
// their first try. A waiting Acquire then sleeps until it is woken, until
// enough of the holders' grants have expired for a majority to be free
// (the fallback for silent expiry), or after a split vote for a backoff
// with full jitter (from 5ms, doubling, up to 500ms), so that clients
// that split one round do not meet again in the next. A key's queue
// outlives the PTTL of the holder its waiters found by a few seconds; an
// uncontended release does not read it.
//
// A waiter that gives up leaves the queue on every node before its
// Acquire returns, and a node whose release woke it already (before it
// gave up) wakes the next waiter as it does so; a release that woke it
// all the same (on its way before it left) reaches its Backend, which
// passes the turn on to the next waiter on that node, as a release would. A waiter whose
// process died does not hold the others up: PUBLISH counts the
// subscribers it reached, and a release that reaches nobody on the first
// waiter's channel drops it and wakes the next one, in the same script,
// once the node has seen the dead process's connections close (at once
// for a process that exited or was killed on a host that is up: its
// kernel closes them). A waiter that is woken but does not act (a stopped
// process, a host gone without closing its connections, a wake-up lost
// with a connection) delays the others until their fallback timers fire,
// at most the TTL of the grant they found held (their own TTL, for a
// waiter that its reservation refused), once: it has left the queue by
// then.
//
// A waiting Acquire whose context ends returns an error matching
// distlock.ErrNotAcquired, ctx.Err() and the context's cause; one that
// Close interrupts, an error matching ErrClosed.
//
// # Fencing
//
// Each node keeps a counter per key. A grant's token T is the highest
// counter among the nodes that voted for it, and it is handed to the
// caller only once a majority of the nodes reported, in one round and
// within a second of that round's first request, a counter of at least T
// while they held the grant. When the votes already show that (a majority
// of the voters reported T itself, in time, as they do once the counters
// agree), acquiring stays one round; otherwise one more parallel round
// goes to every voter, raising its counter to T or confirming it, each
// only while that node still holds the grant, and the token counts only
// if a majority is then at T, in time, with validity left.
//
// Why tokens increase. Let A be granted with token T, settled on the
// majority Q: each node q in Q held A's grant when its counter reached T
// (at A's vote, or at its raise). Let B be a grant handed out after A.
// B's voters form a majority, so they share a node q with Q. On q, B's
// vote came after A's grant on q had ended: the two grants never both
// hold q (the lock key holds one grant's value), and B held its voters from
// its vote until it was handed out (its validity check), after A, while A
// held q when its counter reached T, before A was handed out. So B's vote on q incremented a counter that was at
// least T, B's counter on q is at least T+1, and B's token, the highest
// counter of its voters, is greater than T. Tokens are therefore unique
// per grant and strictly increase in the order grants are handed out,
// with no tie to break. The raise is owner-checked so that this step does
// not rest on clocks: a counter raised on a node that no longer held A's
// grant could have been counted by B's vote before the raise, and without
// the check only the validity check after the raise (a clock reading)
// would rule that out. The model check in this package's tests
// (TestModelExhaustive) explores every interleaving of two clients over
// three nodes and finds no counterexample under these assumptions, and
// one when the raising round or the seed marker is left out.
//
// The argument assumes that a counter never decreases, which is where
// Durability comes in. A node q that lost its counter after it reached T
// breaks it unless it is kept from voting until it holds a counter of at
// least T again. Call the nodes that have their counters (voting, or
// copied and waiting) complete. For every token T handed out, every
// majority of the complete nodes contains a node at T or above, from the
// moment T is settled on: then a majority of the nodes reported T, and
// those that lost their data since are not complete (their copy comes a
// second after their loss at the earliest, after T's round); a loss
// removes a node from both sides of the count; and a copy reads a
// majority of the complete nodes, so the copied node joins both. Every
// token that counted q's old counter was settled within a second of its
// round's first request, before the loss, so by q's copy time: the copy
// gives q a counter of at least T. The model check restarts a node at
// every point of every interleaving and finds no counterexample; it finds
// one when the copy comes before the rounds under way at the loss are
// decided, or when the raising round counts the earlier votes at T
// instead of confirming them (a vote before the loss and a raise after it
// would settle a token that a copy between them misses). Rolling restarts
// rest on the count above and on this package's tests against real
// servers: every interleaving with two restarts is more than the model
// check can hold. A delayed restart
// alone (Redlock's usual advice) protects exclusion, not counters: the
// node comes back with counters at 0, and a token settled on it and a
// minority is repeated.
//
// Tokens are ordinary uint64 values: pass Lock.Token to the storage and
// let it refuse stale ones, with package fence or with the storage's own
// conditional write (a compare-and-set, UPDATE ... WHERE token <= $1). The
// nodes offer no fenced write of their own: data kept in one of them would
// not survive that node's loss.
//
// # Holder and watch
//
// Holder (a Client's Holder, an election's Leader) has List's view of one
// key: it reads the key's lock key on every node, and reports the grant a
// majority of the nodes hold, with its highest token; a grant on a
// minority of the nodes is no holder. It waits for the nodes as List
// does, and reads that key only: "svc/leader" is never "svc/leader2".
// While a grant's token is being settled (its votes still coming in, or
// the raising round on its way), the nodes Holder heard may all have a
// counter below the token the grant is handed out with: Holder then
// reports the grant, with the owner it will have, and a lower token, and
// an election's Leader and Observe show that lower term before the term
// Campaign returns. Nobody is handed that lower token.
//
// WatchHolder (a Client's Watch, an election's Observe) is woken by the
// nodes, not by polling: it subscribes to the key's holder channel on
// every node, on the pub/sub connections of the Backend's waiters, and
// sets the key's watch marker on every node (a key that lives 30s, set
// again every 10s while the watch lasts). While a node holds the marker,
// it publishes on the channel at every grant, release and raised token of
// the key on it. A new grant of the majority view is on a majority of
// the nodes, so the watch needs the nodes that every majority meets: one
// more than a majority leaves out (a majority, of an odd number of
// nodes). A node down (or not confirming the subscription, or refusing
// the marker) then does not keep the watch from being woken by the others; with fewer
// nodes heard the watch fails and the Client polls (distlock.WatchPoll)
// and tries to watch again. A node heard from again later wakes the
// watch, since it may have changed unheard. A grant that lapses is not
// announced, nor a release that reached only nodes not heard: the Client
// reads again at the holder's Expires. A watch costs the watcher a
// subscription on every node, kept while the key is watched and for 1s
// after (watches that follow each other, as Observe's do, subscribe
// once), and a request to every node every 10s; it costs each grant
// and release of the watched key a PUBLISH on every node. A key nobody
// watches costs nothing: the scripts read the marker with the keys they
// read anyway (TestCommandsPerCycle).
//
// A held grant's owner cannot be changed (Lock.SetOwner, an election's
// Proclaim, return an error matching errors.ErrUnsupported). A new owner
// written to a majority of the nodes could not be told from the old one by
// a reader of another majority, which may share a single node with it: the
// value carries no version that would order the two, so Holder could
// report the old owner after SetOwner returned.
//
// # Semaphores
//
// A Backend grants no permits of counting semaphores: it does not
// implement driver.Semaphores, and a Client refuses a permit over it
// (package semaphore's Acquire, TryAcquire and Holders) with an error
// matching errors.ErrUnsupported, taking nothing on any node. A majority
// vote excludes for a limit of 1 only, because any two majorities share
// a node: with a limit of 2 on three nodes, permits voted by nodes {1, 2},
// {2, 3} and {1, 3} keep every node at its limit of two, and three are
// live. Use redislock, or a consensus store (etcdlock, zklock), for
// semaphores.
//
// # Shared locks
//
// A Backend grants no shared (read) locks either: it does not implement
// driver.SharedLocks, and a Client refuses one over it (distlock.WithShared,
// package rwlock's RLock, TryRLock, RDo and Readers) with an error
// matching errors.ErrUnsupported, taking nothing on any node. Unlike a
// limit above 1, a quorum could keep readers and writers apart: a node
// that votes for a reader refuses writers and the reverse, and a reader's
// majority and a writer's share a node. What it lacks is the rest of the
// contract: a waiting writer that blocks later readers needs one line
// across the nodes, which Redlock's per-node queues do not keep in one
// order, so readers could starve writers. Use redislock, etcdlock, zklock,
// pglock or filelock for read/write locks. rwlock's write lock is an
// ordinary lock, which a Backend grants.
//
// # Key layout
//
// On every node, with the prefix P (WithPrefix, default "redlock:") and
// the key written as redislock.HashTag writes it:
//
//	P{key}:lock               the node's vote: "<owner secret>|<token>|<since, server ms>|<owner>", with PX
//	P{key}:token              the node's counter for the key (never expires)
//	P{key}:released:<digest>  tombstone of a release (10s) or of a try that gave up (the TTL): the first 128 bits of the secret's SHA-256, in hex
//	P{key}:waiters            the queue of waiters: members "<Backend id>|<n>", scored by ticket (the holder's PTTL and 3s)
//	P{key}:waiting            present while the queue may have members (as long as the queue)
//	P{key}:woken              the member a release woke: the node is kept for it (at most 250ms)
//	P{key}:watched            the watch marker: present while a Backend watches the key's holder (30s, set again every 10s)
//	P{key}:holder             pub/sub channel of the changes of the node's grant of the key, while it is watched (empty payload)
//	Pwake:<Backend id>        pub/sub channel on which releases wake that Backend's waiters
//	Pnode:seed                the node's seed marker: "ok"; after it lost its data, "p:<found>:<copy>:<vote>" (server ms), then "c:<vote>" once copied
//
// A tombstone is named by a digest of the secret, not by the secret, so
// that the name, a script's KEYS entry, does not give the secret away in
// command logs. The digest is a plain SHA-256 cut to 128 bits: the
// secret is 128 random bits or more (crypto/rand), so nobody who sees the
// name can find the secret by trying values, and no key is needed (a
// keyed hash protects guessable inputs, which a secret is not); 128 bits
// keep the tombstones of one key's tries apart. A try computes it once,
// with its secret.
//
// Tombstones were named "P{key}:released:<secret>" before (no version
// was published with that name); nothing else of the layout changed.
// During an upgrade, Backends of both layouts on the same nodes exclude
// each other as Backends of one layout do: the lock key, its value, the
// counter, the queue and the seed marker are read and written alike, so
// a Backend of either layout finds the other's grants held and is never
// a second holder. A tombstone is written and read only by the Backend
// that drew its secret (a secret never leaves the Backend, its tries and
// its leases), to stop its own requests that arrive late and to tell its
// own retried release from a loss: each layout's Backend finds the
// tombstones it wrote, and the other layout's ones go unread until they
// lapse (10s, or the TTL of a try that gave up). The two names cannot
// be taken for each other: a secret is 26 characters of base32 (upper
// case), a digest 32 hex digits (lower case).
//
// # URLs
//
// OpenURL reads redlock://[user:password@]h1:6379,h2:6379,h3:6379[/db][?options]
// (redlocks:// for TLS), with the credentials, TLS files and go-redis
// options of a redis:// URL applied to every server, and this package's
// options prefix, request_timeout (how long each request waits for each
// server, WithRequestTimeout) and max_ttl.
//
// # Goroutines and connections
//
// A Backend is safe for concurrent use. Every operation sends to all
// nodes at once. Most wait until each node has answered or timed out,
// with one goroutine per node but the last (whose request runs on the
// caller's). A refresh and a release over three nodes or more return
// once the nodes that answered decide them (see above), with one
// goroutine per node; OpenURL and List, which need the answers of a
// majority only, wait for the other nodes briefly once a majority
// answered (a node that is paused does not hold them for its timeout),
// unless a List's result may depend on them (see List). The requests of
// the nodes they stopped waiting for (the stragglers) finish in the
// background, each bounded by its per-node timeout, with what their
// replies call for: Close waits for them for 2s at most, then cancels
// them and returns (a request already on its way ends by its timeout, in
// a goroutine that outlives Close until then).
// The first waiting Acquire that finds its key held opens one pub/sub
// connection per node, kept until Close, with one goroutine reading it
// and one that sends its subscription; passing on the turn of a waiter
// that returned as it was woken runs in a background goroutine. Each
// WatchHolder runs one goroutine until its context ends or Close, which
// waits for it; a key's holder channel unwatched for 1s is unsubscribed
// by a timer and a goroutine per node. Clean-ups and releases that could
// not reach a node are retried in background goroutines that Close
// stops; the marking and copying that a round found due run in one that
// Close lets finish, for 2s at most.
package redlock
