// Package pglock is a driver.Backend over PostgreSQL, on a pgx v5
// connection pool: for applications that already keep their data in
// PostgreSQL and want locks, and fencing of the writes made under them,
// from the same server. It has two modes:
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db.internal/app")
//	backend, _ := pglock.New(pool) // session mode
//	defer backend.Close()          // before pool.Close
//	locks, _ := distlock.New(backend)
//	lock, err := locks.Acquire(ctx, "reports/nightly")
//
//	// Through PgBouncer in transaction mode, with LISTEN on a direct session:
//	pool, _ = pgxpool.New(ctx, "postgres://app@pgbouncer.internal:6432/app")
//	backend, _ = pglock.New(pool, pglock.WithMode(pglock.LeaseMode),
//		pglock.WithListen("postgres://app@db.internal/app"))
//
// Session mode (the default) holds a session advisory lock on a
// connection kept for the lock's life: no time bound, loss seen the moment
// the connection breaks, waiting in the server's own queue, and an
// operator can take the same lock from psql. Use it whenever the
// application reaches the server directly or through a pooler in session
// mode. Lease mode (WithMode(LeaseMode), or mode=lease in OpenURL) holds a
// row of a lease table with an expiry, renewed by the Client's watchdog,
// and keeps no connection: use it through a pooler in transaction or
// statement mode (PgBouncer's pool_mode = transaction), where a session
// advisory lock would be handed to another client with the connection,
// or to hold more locks than the pool has connections. Give it a direct
// session for LISTEN (WithListen) when one is available, so that waiters
// are woken by a release, and watchers of a key (a Client's Watch, an
// election's Observe) by every change of its holder, instead of polling.
//
// It needs PostgreSQL 11 or later (hashtextextended, and procedures that
// commit); it is tested on PostgreSQL 15, and lease mode through PgBouncer
// 1.18 in transaction mode.
//
// # Guarantees
//
// Session mode: a grant is pg_advisory_lock(hashtextextended(key, 0)) held by one
// session: a pool connection that the grant keeps for its whole life and
// uses for nothing else. PostgreSQL grants an advisory lock id to one
// session at a time and keeps it until that session unlocks it or ends, so
// while the connection lives nobody else holds the key: not through this
// package, nor from psql, where an operator takes the same lock with
//
//	SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended('reports/nightly', 0::int8));
//
// (named with their schema, and with a bigint seed, so that no function
// another role created in a schema of the search_path is called instead;
// see Schema and trust).
//
// A grant has no time bound: its Validity has TTL 0, and distlock's Client
// keeps no deadline for it. It ends when it is released or when its
// session ends. A goroutine of the Backend reads the idle connection, and
// the grant is lost, with its holder told through OnLost (which cancels
// the lock's context), as soon as that goroutine reads the server's notice
// that it ends the session (pg_terminate_backend, a shutdown, a crash of
// the server or of the session's backend, idle_session_timeout) or finds
// the connection broken. The server sends that notice just before it
// releases the lock; so that a running holder acts on it before anyone
// else can act on the key, the next grant of a key whose previous grant
// was lost rather than released waits a grace period in the server,
// holding the lock (WithLossGrace, 1s by default; counted from the server's
// start after a restart, see WithLossGrace). A holder stopped for
// longer than the grace when the notice comes is not covered (see Not
// guaranteed).
// Release and Refresh are owner-checked on the holding session:
// after a loss they report an error matching distlock.ErrLockLost and
// change nothing. Refresh checks that the connection is alive and that the
// server still lists the lock as held by it in pg_locks; any failure of
// that check, its context included, ends the grant.
//
// Lease mode: a grant is the key's row of the table distlock_lease, won
// by one statement when the row is free or expired, and naming the
// grant's unguessable id and an expiry of the server's clock, read as the
// statement runs (clock_timestamp()), plus the TTL: never the client's. Its Validity is the
// TTL (in whole milliseconds) from before the statement was sent, which
// the server's expiry cannot precede, so distlock's Client cancels the
// lock's context, at sent + TTL×(1-drift) - margin unless a refresh
// succeeded, before the server can grant the key to anyone else. Refresh
// and Release are single statements guarded by the grant id and the
// expiry: once a grant has expired they change nothing, whoever holds the
// key now, and report an error matching distlock.ErrLockLost. The server
// never reports a loss (OnLost is called only at Close): the Client's
// deadline does. Grants survive a restart of the server, and keep
// expiring by its clock.
//
// A lease-mode Acquire or TryAcquire whose statement fails, or whose
// context ends, after the statement may have reached the server may have
// been granted the key, or queued, all the same: the driver gives up on
// a statement by closing its connection, which does not stop the
// statement in the server, and a statement held up in the network, in a
// pooler, or in a server process not yet scheduled, reaches the server
// later. Before it returns, such an Acquire sends one clean-up statement
// (distlock_lease_abandon), which waits for the try's statement if the
// server is still running it (a try holds a lock of its own id until it
// commits); leaves a tombstone of the try's id, so that the statement
// does nothing if it reaches the server only later; and then releases a
// grant named by the try's id, waking the next waiter as a release does,
// and takes the try's waiter row out of the queue. It never touches
// another grant or waiter: the id is the try's own and unguessable. A
// waiting Acquire whose context ends between its tries leaves the queue,
// likewise before it returns. So an Acquire that gave up leaves nothing
// behind when it returns, nor later: another client's try that comes
// after finds the key as the Acquire found it. The clean-up is bounded by
// the request timeout (WithRequestTimeout, 5s by default), and so is the
// time an Acquire takes to return after its context ended; it takes
// longer than a round trip only while the abandoned statement is still
// running in the server, which it does for long only while it waits for
// a row lock that a transaction of another client holds on the key. A
// tombstone is kept for the longest of the try's TTL, its waiter row's
// life (see Waiting) and 10s.
//
// Permits of counting semaphores (driver.Semaphores, package semaphore)
// are rows of distlock_permit in both modes: a SessionMode Backend keeps
// no connection per permit, and its permits are leases with a TTL by the
// server's clock, renewed by the Client's watchdog, as LeaseMode's locks
// are. Every grant is made in one statement under the semaphore's lock,
// its row of distlock_semaphore locked FOR UPDATE until the statement's
// transaction commits: it deletes the semaphore's expired permits and
// waiters, and grants a permit only while fewer than the limit are live
// (unexpired by the server's clock) and no live waiter came before the
// asker, so that no more than the limit are ever live. The limit is
// stored in the semaphore's row: while a permit is live or a waiter in
// line, an asker naming another limit is refused with a
// *driver.LimitError and granted nothing; once none is, the next asker
// sets it. With Slots, a permit gets the lowest slot that no row of the
// semaphore has (a unique index on the slot backs the grant's check). A
// permit whose holder stops renewing it is given back when its TTL runs
// out; a waiter that dies loses its place when its row lapses (see
// Waiting), and with it its hold on the limit. An AcquirePermit that
// fails, or whose context ends, leaves the line and gives back a permit
// granted as it left before it returns, as a lease-mode Acquire does,
// tombstone included (distlock_permit_abandon). A lock and the permits
// of one key do not exclude each other: they share the key's token
// counter only (do not hold both at once: in session mode, a lock whose
// key a permit took a token from meanwhile is released without its mark,
// and the key's next grant waits the loss grace).
//
// Shared (read) locks (driver.SharedLocks: a Client's WithShared, package
// rwlock's RLock) are granted in both modes. In session mode a shared
// grant is pg_advisory_lock_shared(hashtextextended(key, 0)), the shared form of
// the key's own lock id, held by one session on a connection kept for the
// grant's life as a lock's is. PostgreSQL grants that id shared to any
// number of sessions at once while no session holds it exclusively, and
// exclusively to one session while none holds it at all; so a key's
// shared grants share it with each other and with psql's
//
//	SELECT pg_catalog.pg_advisory_lock_shared(pg_catalog.hashtextextended('reports/nightly', 0::int8));
//
// and exclude, and are excluded by, the key's ordinary locks (Acquire,
// the writer of a read/write lock) and psql's pg_advisory_lock of the
// id. A shared grant is a Lease as a lock is: no time bound (TTL 0),
// Refresh checks that its session still holds the id shared, Release
// unlocks it, it is lost with its session (OnLost), and one granted to an
// AcquireShared that failed is given back before it returns. A reader
// after a lost exclusive grant waits the loss grace as a writer would.
//
// In lease mode a shared grant is a row of its own in
// distlock_lease_reader (version 8 of the schema), named by the grant's
// unguessable id, with its token and an expiry of the TTL from the
// server's clock, as an exclusive grant's: each reader has its own TTL,
// renewed by its own Refresh (one statement, owner-checked by the grant
// id and the expiry), and Release deletes the row; once a reader has
// expired both change nothing and report an error matching
// distlock.ErrLockLost, and the Client's deadline cancels the lock's
// context first, as for a lock. A reader is granted, by one statement
// (distlock_lease_acquire_shared), while no unexpired exclusive grant
// holds the key and no live writer waits before it in the key's queue;
// an exclusive grant is refused while an unexpired reader holds the key.
// The two exclude each other through the key's row of distlock_lease,
// the row an exclusive grant takes: while readers hold the key it names
// no grant, and its expiry is no earlier than any live reader's, so that
// an exclusive grant, which takes the row only once its expiry has
// passed, cannot be made beside a reader. A reader's grant and renewal
// lock that row FOR UPDATE, refuse it while it names an unexpired
// exclusive grant, and raise its expiry to the reader's own if that is
// later, in the transaction that writes the reader's row; a reader's
// release lowers it to the latest expiry of the readers left, and the
// last one's puts it back as released, so that a waiting writer is
// granted at once. A reader takes an exclusive grant found expired out
// of the row, so that the writer's late renewal fails; a reader's
// renewal fails once, by the server's clock when it has the row's lock,
// the reader has expired, or the row names an exclusive grant (made after
// the reader expired). Readers share nothing with psql's advisory
// locks, nor with session mode's (see Not guaranteed). An AcquireShared
// that fails, or whose context ends, leaves nothing behind, as a
// lease-mode Acquire (distlock_lease_abandon, tombstone included).
//
// Rolling upgrade to version 8: lease-mode Backends of version 7 and
// earlier grant exclusive leases through the schema's functions
// (distlock_lease_wait, and distlock_lease_acquire, which it calls),
// which take the key's row only once its expiry has passed: they exclude
// readers as they are, since readers keep that expiry ahead of theirs.
// So the exclusive grants of every Backend, of any version, exclude the
// readers: during the migration (a call that began before it committed
// runs the earlier body), after it, and after an earlier version's
// Migrate run again (or a Backend of version 6 and earlier that finds an
// object missing), which puts back the earlier functions. Version 8
// replaces the functions that release and queue, with the same
// arguments, so that a release wakes the readers queued together and the
// clean-up of a reader's abandoned try releases it; under an earlier
// version's, readers are woken by their polls, and an abandoned reader's
// try keeps the key for its TTL at most. A Backend of this version that
// starts, or its Migrate, puts them back.
//
// Rolling upgrade to version 9: the functions of lease-table mode and of
// the permits keep their names and arguments, and only the clock they
// compare expiries with changes (see Not guaranteed), so Backends of
// every version work beside each other. An earlier version's Migrate run
// again puts back functions that compare with the start of their
// transaction: until a Backend of this version starts, or its Migrate
// runs, a step back of the server's clock can again end a lease early
// for a call that waited for a lock across it. Watches are not affected:
// the functions of version 8 notify them.
//
// # Not guaranteed
//
//   - A holder paused (or starved) for longer than the loss grace after its
//     session ended. Its lock's context is cancelled when the Backend's
//     connection watcher reads the server's notice, and in a resumed
//     process that goroutine may run after the holder's: a check of the
//     lock's Context().Err() just after resuming can still pass, for a few
//     milliseconds after the server freed the lock and granted it to the
//     next holder. A session grant has no local deadline that a check could
//     compare against, and asking the server would cost a round trip per
//     check; fencing (Fence, or a store's fence.Register) is what protects
//     the write.
//   - A server clock stepped back across a restart: a grant's time and the
//     server's start are read from its wall clock, and a grant made after
//     the start but stamped before it waits only what is left of the grace
//     since the start.
//   - A network partition that the server notices before the holder does:
//     the server ends a session whose client it cannot reach after its TCP
//     keepalive (tcp_keepalives_idle, _interval, _count) or tcp_user_timeout
//     settings, and releases the lock, while the holder learns of the break
//     at its next Refresh (the Client's renewal interval: TTL/3, 5s by
//     default) or when its connection reports it. Keep the server's
//     keepalive timeout well above the Client's refresh interval (the
//     Linux default is over two hours).
//   - Locks across databases: advisory locks belong to one database of one
//     server, and every party must connect to the same database. They are
//     not replicated: a standby knows none of them, and a failover ends
//     every session, and with it every grant.
//   - Keys are distinct, ids may not be: two keys whose hashtextextended
//     values collide share one lock id and exclude each other. That is
//     never unsafe, only slower; with 64-bit ids it is rare (around one
//     pair in 10^10 among a million keys). Each key keeps its own tokens.
//   - A single queue across processes: only the first of a Backend's
//     acquirers of a key waits in the server; the others join the
//     server's queue when that one's grant ends (see Waiting).
//   - Session mode through poolers in transaction or statement mode
//     (PgBouncer's pool_mode = transaction): they give the session that
//     holds the lock to other clients between statements. Use lease mode
//     there.
//   - Lease mode: a holder paused for longer than its usable TTL, and a
//     server whose clock jumps forward (its wall clock decides expiry:
//     keep it slewed, not stepped), or that runs faster than the Client's
//     drift allows. Fence the writes. A step back only makes grants last
//     longer: every grant, renewal and release compares expiries with the
//     clock it reads once it holds the rows it decides on
//     (clock_timestamp(), version 9 of the schema), not with the start of
//     its transaction, which a call that waited for a lock across the
//     step would have read before it.
//   - Lease mode: the clean-up of an abandoned try (see Guarantees) when
//     it is not done within the request timeout (the try's statement is
//     still waiting in the server, or the server cannot be reached), or
//     when the try's statement reaches the server after its tombstone is
//     gone: the grant then holds the key until it expires, and a waiter
//     row stands in the queue for its life (three mean pauses, see
//     Waiting) at most. The clean-up also needs the default isolation,
//     READ COMMITTED: under REPEATABLE READ it does not see a grant that
//     its try committed while it waited for it, nor does a try that
//     waited for its clean-up see the tombstone (lease mode already needs
//     READ COMMITTED wherever acquirers contend).
//   - Exclusion between the modes: a session-mode grant and a lease-mode
//     grant of one key do not exclude each other. Use one mode per key
//     space (their tokens do increase together, see Fencing).
//   - Lease-mode readers and PostgreSQL's advisory locks: psql's
//     pg_advisory_lock_shared, and session mode's readers and writers,
//     neither share with nor exclude lease-mode readers (as lease-mode
//     and session-mode locks do not exclude each other).
//   - A lease-mode reader paused for longer than its usable TTL, and the
//     server clock's jumps, as for lease-mode locks.
//   - Readers' order across the Backend and the server: a reader that waited in the
//     Backend behind its writers of the key asks the server as the last
//     of them ends, and a writer of the Backend that arrived after the
//     reader may reach the server's queue first. Readers and writers of
//     different processes are served in the server's order.
//   - Permits: a holder paused for longer than its usable TTL, and the
//     server clock's jumps, as for lease mode. A permit revoked by hand
//     (an operator's UPDATE or DELETE of its row) is learnt of at the
//     holder's next renewal, not at once. A waiter whose tries are late
//     by more than its row's life (a second at least) goes to the back of
//     the line.
//
// # Durability
//
// In session mode exclusion needs nothing durable: it lives in the
// server's memory and ends with the sessions. In lease mode the grants
// are rows: they must survive a crash, as tokens must. Both need the
// server to keep committed transactions: fsync on, and synchronous_commit
// at least on, which the statements that hand out a token or extend a
// grant set for their own transaction when the session has it lower;
// with replicas, fail over only to a synchronous standby, or a promoted
// standby may hand out tokens, and lease-mode grants, again. Releases are
// committed without waiting for their WAL flush: a release lost in a
// crash makes the next grant wait, for the loss grace in session mode and
// until the grant expires in lease mode, and is never unsafe.
// Shared grants are session advisory locks, as session-mode locks are:
// their exclusion lives in the server's memory. A shared grant's token is
// committed durably with its row of distlock_reader, whose release is
// not: a row left by a crash counts only while its session holds the lock
// shared, which it no longer does. Lease-mode readers are rows, as
// lease-mode grants are: a reader's grant (with its token) and its
// renewal are committed durably, its release is not (lost in a crash, it
// leaves the reader to expire).
// Permits are rows in both modes, as lease-mode grants are: the grant and
// the renewal of a permit are committed durably; a release, a leave and
// a renewal of a waiter's place are not, and one lost in a crash leaves a
// permit to expire, or a place in line to lapse.
// distlock_fence, distlock_lease, distlock_lease_reader,
// distlock_resource and the permits' tables are ordinary logged tables: do not make them UNLOGGED,
// and do not restore them from a backup older than the newest tokens (a
// token counter that goes back defeats fencing; raising it is harmless).
//
// # Waiting
//
// A waiting Acquire waits in the server's own lock queue,
// pg_advisory_lock, and is woken by the server when the lock is released:
// no polling. When its context ends, the Backend sends the server a cancel
// request, again until the wait has ended (a cancel request that the
// server takes before the statement has started is ignored), so that the
// server's wait ends too, and closes the connection (a late cancel could
// otherwise hit the connection's next statement).
// If the server granted the lock all the same (the release came first),
// or the statement had taken it before it was cancelled, the Acquire
// first releases it on that connection, as Release does, so that the key
// is free when the Acquire returns, and the next grant need not wait for
// the loss grace. Only when the cancel request fails, or the wait has not
// ended within the request timeout, is the connection closed without
// that: the server then gives the lock up when it ends the session.
// Acquires of one key through one Backend queue in this process, first
// come first served, and only the first of them holds a connection and
// waits in the server; the next takes its turn when the grant ends. The
// server hands a released lock to the session that has waited longest.
//
// A waiting shared Acquire waits in the same queue, with
// pg_advisory_lock_shared, and is cancelled alike. The server's queue
// serves waiters in arrival order and prefers writers: a shared request
// is granted when no exclusive lock is held and no exclusive request
// waits before it, so that a waiting writer keeps later readers out, and
// readers that follow each other in the queue are granted together; an
// exclusive request is granted when the id is not held at all. A shared
// try (pg_try_advisory_lock_shared) fails by the same rule, while a
// writer holds or waits. Within a Backend, shared acquirers of a key do
// not take its turn and overlap freely; one that arrives while an Acquire
// of the key holds or waits for the turn waits behind it, and asks the
// server once it has had the turn, and a shared try fails then. Each
// shared grant, like each lock, keeps a connection of the pool.
//
// In lease mode waiters queue in the server, first come first served: a
// waiting Acquire's first try that finds the key held, or free but
// awaited by earlier waiters, adds a row for it to distlock_lease_waiter,
// in order of arrival, and a try is granted only when no live waiter came
// before it. A release sends NOTIFY distlock_lease, through whatever
// connection the pool has, naming the key and its head waiter, and only
// that waiter tries again: a release costs one try, not one per waiting
// process. A Backend given WithListen keeps LISTEN distlock_lease on its
// own direct session, reconnecting when it breaks. Expiry sends nothing,
// so a waiter also tries again when the current grant expires unless
// refreshed, as the server reported it with the failed try (plus a random
// tenth of the poll interval at most). A waiter polls besides: every poll
// interval (WithPollInterval, 100ms by default) while no LISTEN is live,
// every ten with one; each pause is drawn at random between half and one
// and a half times that. Each try renews the waiter's row, which lives
// three mean pauses (300ms by default without LISTEN, 3s with it): a
// waiter whose process died is passed over at most that long after its
// last try, and the next waiter is then granted the key at its next try,
// which it makes when that row expires (the failed try reports when). A
// waiter whose context ends leaves the queue, and wakes the next waiter
// if the key is free. Acquires of one key through one Backend queue in
// this process as in session mode, the first one in the server's queue;
// the next joins it when the grant ends or its validity does. A try
// (distlock.TryAcquire) is refused while waiters are queued. Backends of
// an earlier version of this package, on a database that this one has
// migrated, do not queue (their tries ignore the queue) and, not
// recognising the notification, poll.
//
// Lease-mode readers wait in the same queue, under names that start with
// "shared:", in order of arrival with the writers, and prefer writers as
// the server's lock queue does in session mode: a reader is granted when
// no unexpired exclusive grant holds the key and no live writer waits
// before it (readers before it, holding or waiting, never keep it out),
// and a writer when nothing holds the key and nobody, reader or writer,
// waits before it. A reader's try fails only because of a writer,
// holding or queued. A release whose head waiter is a reader notifies it
// and every reader queued after it up to the first writer, so that they
// are granted together; the release of the last reader notifies the head
// waiter, a writer whom the readers kept out. A reader's try refused for
// a writer that waits while nothing holds the key wakes the head waiter,
// as a writer's refused try does. A writer refused for readers is told
// when the key's row expires, the latest expiry that any of them has been
// granted or renewed to since the key was last free, and tries again
// then, so that readers that stopped renewing keep it out for a TTL of
// theirs and no longer. Within a Backend a reader waits behind the
// Backend's writers of the key, as in session mode, and takes no turn:
// the Backend's readers of a key overlap freely.
//
// Permits are waited for alike in both modes. A waiting AcquirePermit
// that is not granted adds a row to distlock_permit_waiter, in order of
// arrival (seq, from the server's sequence), and a permit is granted only
// to an asker that no live waiter came before. A release (and a leave, a
// grant that leaves a permit free, a try that finds a permit free for an
// earlier waiter) sends NOTIFY distlock_lease naming the semaphore's key
// and its first live waiter, and only that waiter's process wakes it: a
// release wakes the next waiter, not every waiter, as for lease-mode
// locks. The payload names the waiter rather than a channel per waiter
// being LISTENed, so that one LISTEN session serves every waiter of the
// process; every listening process receives the notification, and
// passes it on only to the waiter it names. The LISTEN session is
// WithListen's in lease mode, and in session mode one the Backend opens
// as the pool opens its connections, on the first waiting AcquirePermit
// (none with a pool's connect hook). Expiry sends nothing: a waiter tries
// again when the first live permit expires, as the failed try reported
// it, and polls as a lease-mode lock's waiter does. Each try renews the
// waiter's row, which lives three mean pauses and a second at least; a
// waiter in line whose turn has not come renews it without the
// semaphore's lock. The AcquirePermits of one semaphore through one
// Backend take turns in this process, first come first served, and only
// the one whose turn it is waits in the server's line, as lease-mode
// locks do; the turn passes on when it is granted. A try (TryAcquire) is
// refused while the permits are held, waiters are in line, or another
// AcquirePermit of the Backend has the turn.
//
// Watchers of a key's holder are woken by NOTIFY too, in both modes, and
// poll only for what the server does not announce (see Holder).
//
// # Fencing
//
// A key's token counter is its row in the table distlock_fence, created on
// first use (see Schema). distlock_acquire, one PL/pgSQL function and one
// round trip, takes the advisory lock and only then increments the counter
// in the same transaction, so a session that does not hold the lock never
// takes a token, and each grant's token is greater than every earlier
// one's. Tokens survive restarts and crashes (see Durability).
//
// In lease mode, distlock_lease_wait (through distlock_lease_acquire), one
// statement, takes the key's row and only then increments the same counter, in the same transaction,
// so a key's tokens increase across both modes (a deployment can move
// from one mode to the other and keep its fenced data) and a try that
// finds the key held takes none.
//
// A shared grant's token is drawn from the same counter by
// distlock_acquire_shared, once the shared lock is held, in the same
// transaction: every grant of a key, shared or exclusive, has a token
// greater than every earlier one's, readers holding at once have
// distinct tokens, and a writer's token is above every reader's before
// it. Readers increment the counter but leave the last exclusive grant's
// owner, time and session in the row, for Holder.
//
// A lease-mode reader's token is drawn from the same counter by
// distlock_lease_acquire_shared, in the transaction that grants it, with
// the key's row of distlock_lease locked: after every exclusive grant
// that committed before it, so above each of theirs; and an exclusive
// grant takes its token only once the key's row has expired, after every
// reader granted before it, so above each of theirs. Tokens are unique per grant; readers
// granted at once take theirs one after another, on the counter's row.
//
// A permit's token is drawn from the same counter, the semaphore key's row
// of distlock_fence, by the statement that grants it, under the
// semaphore's lock: it is greater than every earlier token of the key, a
// lock's or a permit's, and a waiter's place in line (its seq) is never
// a token. With Slots, every earlier permit of a slot has a lower token,
// so one fence per slot (resource "NAME/slot/N", say) admits the
// permit's writes.
//
// A Fence's Admit(ctx, tx, resource, token) checks a token in the
// transaction that writes the resource, atomically with those writes: it
// admits a token at least as high as any admitted before for the
// resource, records it in distlock_resource, and keeps the resource's row
// locked until the transaction ends; a lower token is refused with
// fence.ErrStaleToken (and counted, see NewFence) and the transaction
// aborted. The same check is the SQL function
// distlock_admit(resource, token), which raises SQLSTATE DL001 for a stale
// token, for clients in any language and for triggers:
//
//	CREATE FUNCTION orders_fence() RETURNS trigger LANGUAGE plpgsql
//	SET search_path = pg_catalog, pg_temp AS $$
//	BEGIN
//	    PERFORM public.distlock_admit('orders/' || NEW.id, NEW.fence_token::int8);
//	    RETURN NEW;
//	END $$;
//	CREATE TRIGGER orders_fence BEFORE INSERT OR UPDATE ON orders
//	    FOR EACH ROW EXECUTE FUNCTION orders_fence();
//
// Call Admit first in the transaction: fenced writers of one resource then
// queue on its row before they touch anything else, and cannot deadlock
// with each other.
//
// # When not to take a lock
//
// Many jobs the guide gives a distributed lock are done by PostgreSQL
// alone, with less to go wrong; the examples show each.
//
//   - SELECT ... FOR UPDATE when the work is a read-modify-write of rows in
//     one transaction: the row lock ends with the transaction, so a client
//     that dies cannot keep it.
//   - An optimistic version column (UPDATE ... WHERE id = $1 AND version =
//     $2; 0 rows is a conflict, so read again) when conflicts are rare and
//     the work between read and write must not hold a lock.
//   - A conditional UPDATE (UPDATE inventory SET quantity = quantity - 1
//     WHERE product_id = $1 AND quantity > 0) when the rule is a condition
//     on the row itself: the check and the change are one statement.
//   - An idempotency key claimed with INSERT ... ON CONFLICT DO NOTHING in
//     the transaction of the effect, when the danger is doing the same
//     thing twice; checking first and setting after lets two workers both
//     pass, and setting before the effect loses it if the worker dies in
//     between.
//
// A lock is the right tool when the work is outside the database (a file,
// a call to another service, a long computation) or spans many
// transactions; then fence what it writes.
//
// # Schema and trust
//
// The package's tables and functions live in one schema: the first
// schema of the connections' search_path that holds a table
// distlock_fence or, when none does, the first schema of the search_path
// (never pg_catalog, nor the session's temporary schema). An Acquire
// creates them there on first use if they are missing, and replaces those
// of an earlier version; Migrate does it on demand, and Schema (the file
// schema.sql) is the same SQL for an operator to run with psql, when the
// application's role may use but not create them. List creates and
// changes nothing: with no schema it lists no holder, and a role that may
// only read the tables (SELECT on distlock_fence and distlock_reader, and
// on distlock_lease and distlock_lease_reader in lease mode) can list.
//
// Permits (the semaphore package's keys are "semaphore/" and the name)
// are listed from psql with
//
//	SELECT p.key, s.max_permits, p.token, p.slot, p.owner, p.granted_at, p.expires
//	FROM distlock_permit p JOIN distlock_semaphore s USING (key)
//	WHERE p.expires > now() ORDER BY p.key, p.token;
//
// and the waiters in line with SELECT * FROM distlock_permit_waiter
// WHERE expires > now() ORDER BY key, seq. Permits creates and changes
// nothing, and reads a schema without the permits' tables (an earlier
// version's) as holding none. An operator revokes a permit with
// UPDATE distlock_permit SET expires = '-infinity' WHERE key = ... (its
// holder learns it at its next renewal).
//
// Shared grants (version 7 of the schema) are listed from psql with
//
//	SELECT r.key, r.token, r.owner, r.granted_at FROM distlock_reader r
//	JOIN pg_locks l ON l.pid = r.pid AND l.locktype = 'advisory' AND l.granted
//		AND l.mode = 'ShareLock' AND l.objsubid = 1
//		AND ((l.classid::int8 << 32) | l.objid::int8) = hashtextextended(r.key, 0)
//	ORDER BY r.key, r.token;
//
// (a row whose session holds no shared lock of its key is no grant: its
// session ended). Readers, like List, creates and changes nothing, and
// reads a schema without distlock_reader (an earlier version's) as having
// no readers.
//
// Lease-mode readers (version 8 of the schema) are listed from psql with
//
//	SELECT key, token, owner, granted_at, expires FROM distlock_lease_reader
//	WHERE expires > now() ORDER BY key, token;
//
// Readers and List read a schema without distlock_lease_reader as having
// no lease-mode readers; a role granted SELECT on the tables before the
// migration that added it lists the exclusive grants alone, and needs
// SELECT on distlock_lease_reader for Readers. An operator revokes a
// key's readers with UPDATE distlock_lease_reader SET expires =
// '-infinity' WHERE key = ..., and lets writers in at once with UPDATE
// distlock_lease SET expires = '-infinity' WHERE key = ... AND grant_id
// IS NULL, each statement in a transaction of its own (in one, they take
// the rows in the order opposite to a reader's grant's, and may
// deadlock with it). The readers learn it at their next renewal, which
// then fails, as an exclusive holder does; a reader granted meanwhile
// finds the key free and deletes the revoked readers' rows.
//
// Every statement the package sends, and every function of the schema,
// names the schema's objects with their schema and calls pg_catalog's
// functions and operators by their schema too, with arguments of the
// types they take; the functions also run with search_path pg_catalog,
// pg_temp (all but the procedure distlock_release, which cannot and names
// everything instead). So a function or an operator that another role
// creates in a schema of the search_path (public, where any role may
// create objects before PostgreSQL 15) is never called in their place,
// even one that matches an argument's type better than pg_catalog's
// (CVE-2018-1058); nor is a table of the session's temporary schema taken
// for one of the schema's.
//
// The objects, and the schema that holds them, must be owned by a role
// that the connecting role (current_user) trusts, since their owner could
// run its own code with the connecting role's rights through them: the
// connecting role itself, a role it is a member of, the database's owner
// or a superuser; the schema may also belong to pg_database_owner (public,
// since PostgreSQL 15). In a superuser's session the objects must belong
// to a superuser, so that no other role's code runs with a superuser's
// rights. Acquire, AcquireShared, AcquirePermit, Permits, List, Readers, WatchHolder, Fence.Admit and Migrate refuse
// anything else with an error that names the object and its owner. An operator who installs
// the schema for the application should do it as one of those roles (the
// database's owner, say), or as a role that owns nothing else and is
// granted to the application's role.
//
// # Holder
//
// Holder (a Client's Holder, an election's Leader) reads one key as List
// reads keys, in one statement: in session mode the key's row of
// distlock_fence while pg_locks shows its advisory lock granted to the
// session of that grant, which has not released it (not to the next
// grant, which holds the lock before its token commits, nor to a session
// from psql, whose lock has no token; a grant made through an earlier
// version's distlock_acquire, which an earlier version's Migrate puts
// back in a rolling upgrade, records no session, and its key is read held
// while any session holds the lock), in lease mode its unexpired row of
// distlock_lease. It reads that key only:
// "svc/leader" is never "svc/leader2". SetOwner (Lock.SetOwner, an
// election's Proclaim) updates the owner in that row, owner-checked in the
// same statement: in session mode only while the row has the grant's token
// and the grant's session (by its pid) holds the key's lock, in lease mode
// only while the row names the grant and has not expired; it needs UPDATE
// on the table.
//
// Holder, and WatchHolder below, report a key's exclusive holder only.
// Readers lists the shared grants of exactly the key, by token: the rows
// of distlock_reader whose session (by its pid, and started before the
// grant) holds the key's lock shared in pg_locks, with the token, owner
// and time of each grant; a session from psql that holds the id shared
// has no row and is not listed. In lease mode Readers lists the
// unexpired rows of distlock_lease_reader of exactly the key, by token,
// with their expiry. List lists them too, each key's after
// its exclusive holder, with Shared set. SetOwner of a shared grant
// updates its row of distlock_reader while its session holds the lock
// shared (UPDATE on distlock_reader); in lease mode its row of
// distlock_lease_reader while it has not expired (UPDATE on
// distlock_lease_reader). A grant or release of a shared
// grant notifies no watcher: the key's exclusive holder does not change.
//
// WatchHolder (a Client's Watch, an election's Observe) is woken by the
// server. A watch marks the key's row as watched (distlock_fence in
// session mode, distlock_lease in lease mode; a key never granted gets a
// row, with no grant), renewing the mark every 10s while it lasts, and
// every grant, release and SetOwner of a marked key sends NOTIFY
// distlock_holder, with the key, in its own transaction; a key nobody
// watches costs no notification. The Backend hears it on its LISTEN
// session: in lease mode the session of WithListen, which waiters share;
// in session mode one connection, outside the pool, that the first watch
// opens with the pool's connection config (a pool with a BeforeConnect
// or AfterConnect hook, which that connection would not run, cannot
// watch: WatchHolder reports errors.ErrUnsupported, and a Client's Watch
// polls every distlock.WatchPoll). The mark is a column of the row that each of those
// statements updates, so that a change is either notified or committed
// before the watch begins (the watcher then reads it): none is missed.
//
// What is pushed: every grant (lease mode: an expired grant taken over
// included), release and change of owner, also of Backends of an earlier
// version on a migrated database, whose grants and lease-mode releases
// run the schema's functions. What is not, and how a watcher learns of it:
//
//   - Lease mode: a grant that expires, or that an operator ends by hand.
//     A Client's Watch reads again at the grant's expiry.
//   - Session mode: a session that ends without releasing (terminated,
//     crashed, its network broken), whose lock the server frees silently,
//     and a release by a Backend of an earlier version. PostgreSQL runs
//     nothing at a session's end that could notify, and waiting for the
//     lock in its queue would delay the next holder; so a session-mode
//     watch asks the server every second (distlock.WatchPoll) which
//     session holds the key's lock (pg_locks), and wakes the watcher when
//     that changed: such a loss is seen about a second later.
//   - A LISTEN session that breaks: what was notified meanwhile is lost,
//     so its watches end; a Client's Watch reads again, polls every
//     distlock.WatchPoll, and watches again once the Backend has
//     reconnected. A connection broken without an error (a network
//     partition, a host gone: nothing arrives, and TCP gives up only after
//     minutes) is found by a ping after 5s of silence, which ends the
//     session when no answer comes within the request timeout
//     (WithRequestTimeout): within 5s and that timeout.
//   - Functions of an earlier version, which notify no watcher: in a
//     rolling upgrade an instance of an earlier version migrates when it
//     starts, and puts them back. A watch checks the schema's functions
//     when it begins and each time it renews its mark (every 10s): under
//     those of an earlier version WatchHolder reports
//     errors.ErrUnsupported, and a running watch ends, so that a Client's
//     Watch polls every distlock.WatchPoll. A Backend that starts
//     afterwards, or Migrate, puts this version's back.
//   - Lease mode without WithListen: the pool may be a pooler in
//     transaction mode (PgBouncer's pool_mode = transaction), where
//     LISTEN does not work, so the Backend cannot watch: WatchHolder
//     reports errors.ErrUnsupported, and a Client's Watch polls every
//     distlock.WatchPoll. Give it WithListen, a direct session, to be
//     woken. The same holds for a role that may not mark the key's row
//     (INSERT and UPDATE on distlock_fence, or distlock_lease). A watch,
//     like an Acquire, creates the schema if it is missing.
//
// # Cost
//
// distlock_fence keeps one row per key ever locked or watched (key,
// token, the last grant's owner, time and whether it was released, and
// the watchers' mark), so it grows with the number of distinct keys; so
// does distlock_lease in lease mode (one row per key, kept after release
// so that its token stays).
// distlock_lease_waiter holds a row per waiting Acquire, deleted when it
// is granted or gives up; the row of a waiter that died is deleted by the
// key's next grant. distlock_lease_abandoned holds the tombstones of the
// tries abandoned within their lifetime, and one more per key at most.
//
// In session mode each held lock takes an entry of the server's shared lock table, which
// holds max_locks_per_transaction × (max_connections +
// max_prepared_transactions) locks of all kinds for the whole server; when
// it is full, any session that needs a lock fails with "out of shared
// memory". Each held lock, and each key awaited through a Backend, also
// takes a connection of the pool, and so of the server's max_connections:
// size the pool (pool_max_conns) for the locks held at once plus the
// application's own queries. A try that finds no free connection within
// the request timeout fails with distlock.ErrUnavailable; a waiting
// Acquire waits for one. In lease mode a lock takes no connection between
// statements, and a lock's cost is its row and the watchdog's refresh, one
// statement every TTL/3 by default; a Backend given WithListen keeps one
// connection of its own, outside the pool.
//
// A shared grant costs what a lock does (a connection for its life, an
// entry of the server's lock table, two statements: distlock_acquire_shared
// and the release), and writes the key's token row and its own row of
// distlock_reader, deleted by its release; the grant also reads pg_locks
// once, to delete the rows of the key's readers whose sessions ended.
// Concurrent readers of a key take their tokens one after another, on the
// key's row of distlock_fence, each for the time of one commit. The
// exclusive path costs nothing more for shared locks: the same statements
// and round trips, and in the Backend a counter of the key's writers
// taken and given back under a mutex. List reads distlock_reader beside
// distlock_fence, with a second scan of pg_locks for the readers.
//
// A lease-mode reader costs what a lease-mode lock does: no connection
// between statements, two statements for an uncontended grant and
// release, and one per renewal; it writes its own row of
// distlock_lease_reader, the key's token row and the key's row of
// distlock_lease, which it locks FOR UPDATE first (creating it, free,
// for a key never granted): a key's reader grants, renewals and releases
// run one at a time, as its grants take their tokens one at a time on
// the token row anyway. The exclusive lease-mode path is unchanged (two
// statements per uncontended cycle; its grant does not read
// distlock_lease_reader), and the Backend counts the key's writers under
// a mutex as in session mode. List reads distlock_lease_reader beside
// distlock_lease.
//
// A watch costs one statement every 10s (its mark), and in session mode
// a read of pg_locks every second; a session-mode Backend that has
// watched keeps one LISTEN connection, outside the pool, until Close.
// Each grant, release and SetOwner of a watched key sends one
// notification; NOTIFY serialises the commits of the transactions that
// send one, which a key nobody watches never does.
//
// In session mode an uncontended Acquire and Release cost one pool
// checkout and two statements (distlock_acquire; the release, one
// statement that marks and unlocks), each one round trip with a prepared
// statement that pgx caches per connection, and two row writes: the token,
// committed durably, and the release mark, committed without waiting for
// the flush. That, not round trips, is most of what they cost above a bare
// pg_advisory_lock and pg_advisory_unlock, which write nothing. In lease
// mode they cost two statements too, each with its own checkout and round
// trip, and three row writes (the lease row and the token; the release).
// A contended lease-mode grant costs three: the try that queues the
// waiter, the try after the release names it, and its release (and a
// renewal of the waiter's row per pause while it waits). Each try also
// takes a transaction-level advisory lock of its own id, which nothing but
// its own clean-up waits for, and looks its id up among the tombstones
// (one index probe). Those locks are of the two-int4 form, with the first
// key 1685086061 (migrations take 1685086060): an application's own
// advisory locks of that form should use other first keys.
//
// List reports the keys in distlock_fence whose lock is held, with the
// token and owner of their last grant (pg_locks shows lock ids, not keys).
//
// # Goroutines
//
// In session mode a Backend runs one goroutine per held lock, shared or
// not, reading its idle connection, and one per waiting Acquire while its context is being
// cancelled. In lease mode it runs one for LISTEN when given WithListen,
// and none per lock or reader;
// in session mode, one from the first WatchHolder, or waiting
// AcquirePermit, on. Permits run none of their own. Each watch runs one
// until its context ends. Close ends them.
// The Backend and its leases are safe for concurrent use.
//
// # URLs
//
// OpenURL takes libpq's URL with this package's parameters added:
//
//	postgres://app@db.internal/app?sslmode=verify-full
//	postgres://app@pgbouncer.internal:6432/app?mode=lease&listen_host=db.internal:5432
package pglock
