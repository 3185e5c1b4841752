// Package redislock is a driver.Backend over Redis: one server, a
// Sentinel-managed primary, or a Cluster, through a go-redis client. Use it
// where a lock is for efficiency (duplicate work is merely wasteful), or for
// correctness together with fencing tokens checked by the storage (see
// Fencing), on a server kept as Durability describes. It also grants the
// permits of counting semaphores (package semaphore; see Guarantees), and
// shared (read) locks (AcquireShared, for package rwlock and
// distlock.WithShared).
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	backend, err := redislock.New(rdb)
//	...
//	defer backend.Close()
//	client, _ := distlock.New(backend)
//	err = client.Do(ctx, "reports/daily", func(ctx context.Context) error { ... })
//
// # Guarantees
//
// A grant is one round trip: a Lua script sets the lock key with SET PX and
// a random owner value from crypto/rand (unguessable), and increments the
// key's fencing counter, atomically. While the lock key holds that value,
// nobody else is granted the key; Redis deletes it once its TTL, counted by
// the server from when the script (or the last refresh) ran, has passed.
// Each Validity is timed from before its request was sent, so the Client's
// deadline for a lock comes before the server's expiry when the clocks of
// this host and the server run at rates within the drift. A grant that a
// release hands to a queued waiter (see Waiting) is timed from before the
// waiter's last refresh of its place was sent, for the TTL plus the time
// the server counted from that refresh to the hand-off, rounded down.
//
// Refresh and release are owner-checked scripts: a holder whose lease lapsed
// can neither extend nor delete the next holder's lock, and learns of the
// loss (distlock.ErrLockLost). The Client's watchdog refreshes many leases
// in one pipeline (RefreshAll).
//
// A lost reply does no harm: a release retried after a lost reply reports
// success if it had taken effect (while it is the key's last release and
// the released grant's TTL would still run: the release renames the lock
// key to the key's last-release key, which keeps that TTL; otherwise, and
// if the grant had really gone, it reports distlock.ErrLockLost), and an
// Acquire whose
// request failed after sending undoes what the request may have done
// before returning, so that neither a lost reply nor a request delayed in
// the network leaves a grant to nobody. When that clean-up fails too, the
// Backend goes on with it in the background until it succeeds, the grant
// would have lapsed anyway, or the Backend is closed. A request that
// go-redis sent again after a read timeout, whose first copy arrives after
// the grant was released, finds the release in the last-release key and
// does nothing (while that is the key's last release and the grant's TTL
// would still run; a copy later still takes the key for its TTL, for
// nobody, with a higher token).
//
// Redis never reports that a grant is gone: OnLost is never called, and a
// holder learns of a loss from its next refresh or its Client's local
// deadline.
//
// Besides a holder that crashes or pauses (its grant lapses after its TTL;
// the Client cancels the lock's context before that, by its local clock)
// and lost replies, it survives a pub/sub connection that breaks while
// clients wait (see Waiting) and a waiter that dies while queued.
//
// Permits of counting semaphores (AcquirePermit, for package semaphore)
// live under their key's hash tag too: a sorted set of the live permits,
// each scored by its expiry in the server's time (TIME, read by the
// script, never a client's clock), the grants' tokens, slots and owners
// in a hash beside it, and the limit in a key of its own. Every script
// that reads or changes them first drops the permits and the waiters
// whose time ran out, so a permit whose holder stopped refreshing is given
// back within its TTL. A try is one script: it grants a permit when fewer
// than the limit are live and nobody waits before the asker, and refuses
// an asker that names another limit than the stored one with a
// *driver.LimitError, granting nothing. The limit is kept while a permit
// is live or a waiter in line (its key expires with the last of them);
// once none is, the next asker sets it. With Semaphore.Slots a grant
// takes the lowest slot that no live permit has. Refresh and release are
// owner-checked, as a lock's are; a release retried after a lost reply
// succeeds (the first one recorded the permit as released, until its TTL
// would have run out), and an acquire whose request failed undoes what it
// may have done and records its secret, so that a late copy of the
// request does nothing, retried in the background as a lock's clean-up
// is. RefreshAll refreshes permits with locks, one script call per permit
// in the locks' pipeline. Holder, WatchHolder and List see locks
// only; Permits reads a semaphore's limit, permits and line in one
// script.
//
// Shared (read) locks (AcquireShared) live under their key's hash tag
// too, so that a Cluster keeps all of a key's grants in one slot: a
// sorted set of the key's live shared grants, each scored by its expiry
// in the server's time (TIME, read by the script, never a client's
// clock), their tokens and owners in a hash beside it. Every check and
// grant is one script. A shared grant is made while the key's lock key
// is absent and no live exclusive waiter stands in the queue before the
// asker (a newcomer, TryAcquire included: in the queue at all); the
// exclusive acquire script counts the live shared grants as a holder, so
// that the key's ordinary lock (the write lock of package rwlock) waits
// for them. A shared grant whose holder stopped refreshing is dropped by
// the next script that finds it lapsed, within its TTL. Refresh and
// release are owner-checked; a release retried after a lost reply
// succeeds (the first one recorded the grant's secret as done, until its
// TTL would have run out), and an AcquireShared whose request failed
// undoes what it may have done and records its secret as done, so that a
// late copy of the request does nothing, retried in the background as a
// lock's clean-up is. RefreshAll refreshes shared grants in the locks'
// pipeline, one script call each. A Backend made WithUnordered keeps no
// queue for its exclusive waiters, which readers would then not see
// wait: its AcquireShared fails with an error matching
// errors.ErrUnsupported. Its Acquire still waits for the shared grants
// that other Backends made, by their expiry (see Waiting).
//
// A grant's secret lets whoever knows it release the grant. It stays out
// of the commands' arguments as a hook on the go-redis client that logs
// or traces commands sees them (cmd.String, redisotel, or cmd.Args()
// encoded by encoding/json, slog.JSONHandler or zap): every argument that
// holds it (the secret, the value prefix "<secret>|", a waiter's place in
// the queue, a tombstone's name) is sent as a redact.Secret of module
// internal/redis, which go-redis writes as its bytes and those renderings
// show as "[secret]". It stays out of the replies too, as a hook that
// logs them sees them (cmd.String after the call): Holder and List read a
// lock value, which begins with its grant's secret, with a script
// (peek.lua) that replies with the value without it (so they need the
// scripting permission that acquiring needs: an ACL user limited to
// @read, enough for GET and PTTL, cannot call them); Readers and Permits
// reply with the shared grants' and permits' values, never with the
// secrets they are filed under; and a script that acquires, refreshes or
// releases replies with codes and tokens. The server sees it: the lock
// key's value and a tombstone's name hold it, and its slow log, MONITOR,
// the append-only file and the replication stream carry it.
//
// A client that sent a redact.Secret as text rather than as its bytes
// would send "[secret]" for every grant's secret, and the grants of two
// Backends would match each other's. Every script that takes a secret
// refuses one that is not base32, as every secret a Backend draws is,
// before it does anything: such a client's every acquire fails with an
// error that begins with "BADSECRET" and says why, and nothing is
// written. The check is a string match in the script: no command more.
//
// # Not guaranteed
//
//   - Process pauses of the holder longer than its remaining validity (a GC
//     pause, a stopped VM): the holder wakes up believing it still holds the
//     lock. Only the storage can stop it (see Fencing).
//   - Clock jumps on the server. Redis expires keys by its wall clock; a
//     clock stepped forward expires grants early, while their holders still
//     count on them. Keep server clocks slewed, not stepped; clock rates
//     that differ by more than the drift allowed for are not covered either.
//   - Eviction. A maxmemory-policy other than "noeviction" lets Redis
//     delete keys when memory runs out: an evicted lock key lets a second
//     client be granted the key while the first holds it, and an evicted
//     fencing counter restarts tokens at 1 (measured on Redis 7.0 in this
//     package's tests with allkeys-lru). The volatile-* policies evict the
//     lock keys, which have a TTL; the allkeys-* policies the counters too.
//     Set "maxmemory-policy noeviction": a full server then refuses new
//     grants instead of breaking held ones. The first Acquire of a Backend
//     reads the policy with CONFIG GET (on every primary of a Cluster) and
//     refuses every Acquire with an error matching
//     distlock.ErrInvalidOption while it is anything else; the check is
//     skipped, silently, where CONFIG is renamed away or denied by an ACL
//     (the policy is then the operator's responsibility), and
//     WithEvictionAllowed accepts the risk. A passed check is not repeated:
//     a policy changed later goes unnoticed.
//   - Keys changed by something else than this package. A lock key deleted
//     by hand (DEL, FLUSHALL) lets a second client be granted the key; the
//     holder learns of the loss at its next refresh. Deleted counters
//     restart tokens at 1.
//   - Fairness with WithUnordered (see Waiting).
//   - Writer preference over the exclusive waiters of a WithUnordered
//     Backend, and of Backends of versions before shared locks: they do
//     not queue, or do not know shared waiters (such a Backend's release
//     hands the key to a shared waiter as to an exclusive one), nor see
//     shared grants (its Acquire grants the key while readers hold it).
//     Upgrade every Backend of a key before its first shared lock.
//   - Exclusion between readers and writers after any of the above: a
//     shared grant lost, evicted, deleted by hand or expired early lets a
//     writer in while its holder still reads.
//   - More permits than the limit after any of the above: a permit lost
//     with the server's memory, evicted, deleted by hand or expired early
//     by a clock stepped forward lets another asker be granted in its
//     place while its holder still counts on it.
//
// # Durability
//
// The lock keys and the fencing counters live in the server's memory. A
// server restarted from an older snapshot (or none) has forgotten grants,
// so a second client can be granted a key still held, and tokens regress:
// the counter restarts below tokens already handed out, so a storage fence
// that survived the crash refuses the new holder, and one that did not
// cannot tell stale writers from new ones. Measured on Redis 7.0 in this
// package's tests: a key granted three times (token 3), the server killed
// with SIGKILL and restarted on the same directory grants token 1 with the
// default configuration (no persistence), and token 4 with "appendonly yes"
// and "appendfsync always". With "appendfsync everysec" up to a second of
// grants can be lost in a crash.
//
// Replication is asynchronous: a grant acknowledged by the primary may not
// have reached the replica that a failover promotes, which then grants the
// key again, with a counter that may be behind. WithWaitReplicas narrows
// this window (a grant is confirmed only once n replicas have it) but does
// not close it: WAIT is not consensus, and a failover can still promote a
// replica that missed the write. Fencing does not save this case: a replica
// that missed exactly one grant hands out the same token again, and a
// storage fence admits a token equal to the highest it has seen (so that a
// holder can write twice), so both holders' writes are admitted (measured
// in torture: lost updates in 5 of 5 rounds with a fenced store). When the
// replica missed more than one grant the new token is lower and the fence
// refuses the new holder instead, which is safe but stops progress. What
// WithWaitReplicas does give is tested against a real Sentinel: after
// SENTINEL FAILOVER, a grant the replica confirmed is still held on the
// promoted primary, its holder refreshes and releases it there, and the
// next token is higher.
//
// Permits, the line of their waiters and the stored limit live in memory
// as the lock keys do, and need what they need: a server that forgot
// held permits grants up to the limit again while they are held.
// Shared grants too: a server that forgot them grants the key to a
// writer while they are held.
//
// For exclusive grants and monotonic tokens a deployment therefore needs
// "appendonly yes" and "appendfsync always" on the primary, and no failover
// to a replica that might lag (or none at all). Cluster resharding moves a
// lock's keys together (they share a slot) and keeps tokens; a failover
// within the Cluster has the replica hole above.
//
// The scripts need Redis 6.0 or later: they set values with KEEPTTL, and
// read the server's clock (TIME) after writing, which only effects
// replication allows (the default since Redis 5; Redis 7 has no other).
// The package's tests run on Redis 7.0.
//
// # Waiting
//
// Waiters queue in Redis, in arrival order (a sorted set per key), and a
// release hands the lock to the first live waiter itself, from every
// process alike: the release script draws the waiter's token, sets the lock
// key with the waiter's secret and TTL (kept with its place in the queue)
// and publishes the grant on the waiter's wake channel, and the waiter's
// Acquire returns without a request of its own (with WithWaitReplicas, once
// its own try has found the grant and WAIT has confirmed it). A hand-off
// is one request and the release's round trip; under contention, the
// releaser asking again at once, it costs the server 22 commands, the
// two script calls included (TestHandOffServerCommands). A newcomer (TryAcquire included) cannot
// take a free key while others queue for it, nor a key handed on, which
// is never free in between.
//
// A waiting Acquire tries first, without subscribing or queueing: an
// uncontended acquire and release are two requests, waiting or not, and
// the scripts then skip the queue altogether. When the key is held the
// waiter subscribes to its Backend's wake channel, then tries again, which
// queues it (and marks the grant as waited for, so that its release looks
// at the queue; a release of a grant nobody waited for does not). A waiter
// also arms a timer for the holder's remaining TTL, for a holder that
// vanished without releasing, capped at a third of the waiter liveness (WithWaiterLiveness, default
// 3s), since trying again refreshes its place in the queue; a waiter whose
// place lapsed is dropped from the queue, and one that gives up leaves it.
// All the waiters of one Backend share one pub/sub connection and one
// channel, which survive reconnects (wake-ups published while the
// connection was down are covered by a retry; a waiter dropped meanwhile
// joins again, at the back; a grant whose message was lost is found by the
// waiter's next try, at the latest when it refreshes its place).
//
// A waiter whose process died does not hold the queue up. On a single
// server (or a Sentinel-managed primary), PUBLISH counts the subscribers
// that a wake-up reached: a release that finds nobody subscribed to the
// first waiter's wake channel drops that waiter and serves the next one,
// in the same script. The delay a dead waiter causes is then nothing beyond
// that release, once Redis has seen the dead process's connections close
// (at once for a process that exited or was killed on a host that is up:
// its kernel closes them; TestKilledWaiterIsSkipped shows it with a
// waiter killed with SIGKILL). Otherwise a dead waiter delays the queue
// until its liveness lapses (3s by default: it is then dropped) or, if its
// turn comes first, by the TTL of the grant handed to it, as a holder that
// dies does: a waiter whose connections stay open while it does not run (a
// stopped process, a host gone without closing them), any dead waiter on a
// Cluster (where PUBLISH counts only the subscribers of one node), and a
// waiter that dies between the hand-off and its reading of the grant.
//
// With WithUnordered there is no queue: waiters subscribe to the key's
// release channel, a release wakes every waiter of the key, and they race
// for it, in no particular order, within a process as between processes.
// That costs about one request per waiting process and hand-off, and lets
// a waiter starve (see WithUnordered).
//
// Classic pub/sub (SUBSCRIBE, PUBLISH) is used, not sharded pub/sub: it
// works on every topology with one connection per Backend. On a Cluster a
// classic message reaches every node, so a subscription on any node hears
// wake-ups of keys in every slot, at the price of cluster-bus traffic for
// each of them. Sharded pub/sub would keep messages on one shard but need
// a connection per shard and re-subscription when slots move.
//
// A waiting AcquirePermit waits as a lock's Acquire does, on the same
// wake channel and pub/sub connection, but claims its permit with its own
// try: nothing is handed over. The semaphore's line is a sorted set
// ranked on arrival, and each waiter's place a lease, its liveness
// deadline in the server's time, renewed by each of its tries (at most a
// third of the liveness apart) and dropped when it lapses, with its hold
// on the limit. The waiter of rank r (from 0) is granted when fewer than
// the limit less r permits are live, so that those before it keep
// theirs, and a newcomer (TryAcquire included) only when nobody waits; a
// waiting try that joins the line (or refreshes its place) is granted by
// that same try when its rank then lets it. A permit given back, a waiter
// leaving the line, and a permit or waiter that any permit script finds
// lapsed (Permits, a refused try included) publish on the wake channel
// of each waiter that a free permit now awaits and did not before, and of
// no other: the first in line when one permit frees. A grant publishes
// nothing: the waiters free after it were free before it. On a single
// server, a waiter that nobody hears there is dropped, and the next one
// woken, in the same script, as for locks. A permit that lapses with no
// script to find it is claimed at the waiter's fallback timer: the first
// live permit's expiry, capped at a third of the liveness. A waiter whose
// context ends leaves the line before its AcquirePermit returns (in the
// background, retried, if that fails), and a permit that a try whose
// reply was lost may have been granted is given back. WithUnordered does
// not apply to permits: they are always served in line.
//
// A waiting AcquireShared waits as a lock's Acquire does, on the same
// wake channel, in the same queue: shared and exclusive waiters stand in
// one line, a shared waiter's id marked as such ("<Backend id>:s<random>").
// A release that frees the key (the exclusive grant released, the last
// live shared grant released, or a waiter leaving) hands it to the first
// in line: to each shared waiter at the head of the line, a shared grant
// of its own, drawn, recorded and published in the same script as a
// lock's hand-off, until an exclusive waiter is first; to an exclusive
// waiter first in line, the lock, once no shared grant is live. A shared
// waiter is thus granted when no exclusive grant is live and no
// exclusive waiter is before it (shared waiters in a row are granted
// together), and an exclusive waiter when nothing is live and nobody is
// before it: a waiting writer keeps the readers that come after it out,
// so writers are not starved. A shared grant that lapses is not
// announced: an exclusive waiter's fallback timer is then the first live
// shared grant's expiry, capped at a third of the liveness. A
// WithUnordered Backend's Acquire, which does not queue, waits for shared
// grants by that timer only.
//
// A waiting Acquire (or AcquirePermit) whose context ends returns an
// error matching distlock.ErrNotAcquired, ctx.Err() and the context's
// cause; one that Close interrupts, an error matching ErrClosed.
//
// # Fencing
//
// A grant's token is the new value of the key's counter, incremented (INCR)
// by the script that grants the key, so each token is higher than every
// token granted before it for the key, as long as the counter is kept (see
// Durability and Eviction above). Counters never expire: one is kept per
// key ever locked.
//
// A permit's token is drawn the same way, from the same counter, by the
// script that grants the permit (never when its waiter joins the line):
// the tokens of a key's locks and permits are unique and increase
// together. With Semaphore.Slots, a permit's token is thus above every
// earlier token of its slot, so one fence per slot admits it.
//
// A shared grant's token is drawn from the same counter too, by the script
// that grants it (shared_acquire.lua, or a release's hand-off): every
// grant of a key, shared or exclusive, has a token above every earlier
// grant's, and a writer's token is above those of every reader before it,
// so a fence that admits the writer refuses a stale reader's writes.
// Readers that hold at once have distinct tokens.
//
// Pass Lock.Token to the storage and let it refuse stale tokens: through
// package fence, or, for data kept in Redis, through a Fence, which checks
// the token and writes the data in one script, atomically: Set, HSet and
// Del; IncrBy for a counter or a balance (an update relative to the value
// as it is, where a read and then Set of an absolute value would lose
// updates); Exec for any list of commands; and Eval for the caller's own
// Lua body (a check and a write of its own, say), which runs after the
// token check, in the same script, and cannot leave the fence key changed.
//
// # Holder and watch
//
// Holder (a Client's Holder, an election's Leader) reads one key's lock
// key and its PTTL, in one script call, one round trip; Expires is this host's clock plus
// the PTTL. It reads that key only: "svc/leader" is never "svc/leader2".
// It reports the exclusive holder only; Readers (one read-only script)
// lists the key's live shared grants, by the server's clock, and List
// lists them after each key's exclusive holder, with Shared set. A
// watch is not woken by shared grants: they do not change the holder.
//
// WatchHolder (a Client's Watch, an election's Observe) is woken by Redis,
// not by polling: it subscribes to the key's release channel, on the pub/sub
// connection the Backend's waiters share, and sets the key's watch marker
// (a key that lives 30s, set again every 10s while the watch lasts). While
// the marker exists, the scripts publish on the release channel at every
// grant, hand-off and release of the key, and a change of owner always
// does (Lock.SetOwner, an election's Proclaim: an owner-checked script
// that keeps the grant's expiry). A grant that lapses is not announced:
// the Client reads again at the holder's Expires. A watch costs the
// watcher a subscription and one script call every 10s; it costs every
// grant and release of the watched key a PUBLISH (on a Cluster, a message
// over the cluster bus), and, in the default mode, a look at the empty
// queue on release. A key nobody watches costs nothing: an uncontended
// acquire and release stay two requests and eight server commands
// (TestUncontendedServerCommands), shared locks or not: the acquire
// script looks for shared grants in the EXISTS it sends anyway, and its
// release never looks for them. Backends of an older version, which do
// not know the marker, grant and release without announcing it: during a
// rolling upgrade, a watcher sees their changes at the holder's expiry.
//
// # Key layout
//
// Keys are arbitrary UTF-8 (distlock.ValidateKey). Each lock key is
// written as a Cluster hash tag, HashTag(key): "{" + key + "}" with '%',
// '{' and '}' percent-escaped (%25, %7B, %7D). The escaping is one-to-one,
// so distinct keys never share Redis keys, and the tag contains no brace,
// so every Redis key of one lock hashes to one slot whatever the key
// contains. With the prefix P (WithPrefix, default "distlock:"):
//
//	P{key}:lock               the grant: "<owner secret>|<token>|<since, acquiring host's ms>|<waited: 0 or 1>|<owner>", with PX
//	P{key}:token              the fencing counter (INCR per grant, never expires)
//	P{key}:last               the key's last release: the released grant's value (the lock key renamed, with the TTL it had left)
//	P{key}:released:<secret>  tombstone of an Acquire that gave up
//	P{key}:queue              waiter id -> arrival order (sorted set)
//	P{key}:alive              waiter id -> liveness deadline, server ms (sorted set)
//	P{key}:released           pub/sub channel of releases with WithUnordered (empty payload), and of the changes of the key's holder while it is watched (payload "h")
//	P{key}:watched            the watch marker: present while a Backend watches the key's holder, with PX
//	P waiters:<Backend id>    pub/sub channel waking a Backend's waiters (payload: the waiter's id, "<Backend id>:<random>"; from a release that hands the waiter the lock, "<id>|<token>|<ms since its last refresh>")
//	P{key}:permits            a semaphore's live permits: secret -> expiry, server ms (sorted set)
//	P{key}:permit-grants      secret -> "<token>|<slot, -1 for none>|<since, acquiring host's ms>|<owner>" (hash)
//	P{key}:limit              the semaphore's stored limit, while a permit is live or awaited
//	P{key}:line               a semaphore's waiters: waiter id -> arrival order (sorted set)
//	P{key}:line-alive         waiter id -> liveness deadline, server ms (sorted set)
//	P{key}:permits-done       secret -> until, server ms: permits released (until their TTL would have run out) and acquires given up (sorted set)
//	P{key}:readers            the key's live shared grants: "<secret>|" -> expiry, server ms (sorted set; expires with the last grant)
//	P{key}:reader-grants      "<secret>|" -> "<token>|<since, acquiring host's ms (server's at a hand-off)>|<owner>" (hash; as P{key}:readers)
//	P{key}:readers-done       "<secret>|" -> until, server ms: shared grants released (until their TTL would have run out) and shared acquires given up (sorted set)
//	distlock:fence{res}:fence a Fence's highest admitted token for resource res
//
// A shared waiter's queue member is a lock waiter's, its id's random part
// starting with "s" (lower case, which crypto/rand.Text never writes).
//
// A semaphore's keys expire with what they hold (the permits' at the last
// permit's expiry, the line's at the last waiter's deadline, the limit at
// the later of both), so none is left once all lapsed. Delete a counter
// only with the knowledge that tokens for that key restart at 1.
//
// The layout, the grant's value, the queue's members and the messages on
// the channels are what Backends of different versions share (a release
// by one hands the lock to a waiter of another): the scripts that read and
// write them may change (each version loads its own), the layout does not
// without a note here, so Backends of an older and a newer version can run
// against the same keys during a rolling upgrade.
//
// # Goroutines and connections
//
// A Backend is safe for concurrent use. It opens one pub/sub connection,
// with its go-redis goroutines and one dispatcher, when the first waiting
// Acquire finds its key held, and keeps it until Close; otherwise it uses
// the client's pool. Its wake channel (with WithUnordered, a key's release
// channel) stays subscribed for a second after its last waiter left, so
// that a chain of hand-offs subscribes once; meanwhile it holds a timer (no
// goroutine until it fires). An Acquire
// whose clean-up failed (see Guarantees), or a waiter whose request to
// leave the queue (and release a grant handed to it meanwhile) failed,
// leaves one goroutine retrying it, which Close stops; so do a permit's
// waiter and acquire, and a shared grant's, as a lock's. The first Acquire
// (or AcquireShared) of a Backend sends one CONFIG GET
// besides the script. Each WatchHolder runs one goroutine, on the
// pub/sub connection, until its context ends or Close. A *redis.Ring is not supported (its shards do not
// share pub/sub).
package redislock
