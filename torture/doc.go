// Package torture is distlock's fault-injection harness: it runs lock
// workloads in real worker processes against real servers (Redis, five
// independent Redis for Redlock, etcd, ZooKeeper, PostgreSQL, a gateway, a
// local lock directory), injects the faults a distributed lock must survive,
// records every operation, and checks the histories with porcupine and with
// plain counts.
//
// # What a run is
//
// A Run starts a Store (a register per resource, on loopback TCP) in one of
// its modes: Unfenced, which accepts every write (the baseline), Fenced,
// which refuses a write whose fencing token is below the highest admitted
// for its resource (fence.Register, atomically with the write), and, on
// PostgreSQL, PGFenced, which keeps the registers in PostgreSQL and makes
// each write a transaction fenced by pglock.Fence.
// Worker processes (this test binary re-executed with WorkerEnv set; see
// RunWorkerIfRequested) open a distlock.Client over the backend under test
// by URL, and execute the harness's commands: acquire, read, write,
// read-modify-write, release. A Scenario drives the workers and injects its
// fault: SIGSTOP of a holder between its check and its write, a write
// delayed in a faultproxy, a holder cut off from the lock service (on
// ZooKeeper until its session expires), a server killed with SIGKILL and
// restarted, a ZooKeeper or etcd leader killed, a PostgreSQL session ended
// by pg_terminate_backend, a Redis failover to a replica that missed
// grants, a late release, a lost acquire reply; on Redlock a node paused,
// delayed or cut off, the holder cut off from a majority, a node of a bare
// majority killed and restarted with and without its data; and a lock
// server's wall clock jumping forward (moved in redis-server by
// testserver's clock shim). Every scenario runs once
// per mode; the unfenced run must show the fault biting, and the
// fenced run must accept no stale write.
//
// # Elections
//
// The election rows (election/pause, election/partition and
// election/server-kill, on every backend but file, where no term lapses
// and no server dies, and partition not on PostgreSQL, where a session cut
// off keeps its lock) run the same scenarios on package election's
// terms: a Scenario with Election set opens its workers as candidates, so
// that acquire campaigns (election.Campaign in the election named by the
// row's key, the worker's name as the value), release resigns, and every
// write carries the term's token. The checkers need nothing new: a term
// is a grant of the election's key, so the mutex model finds two live
// terms, the token model a term not above the last, and the register a
// late write of an old leader that a fenced store admitted. A third
// worker follows the election with election.Observe; the row counts an
// error where it reports a leader out of term order, with no value or
// another candidate's, of a term no grant of the run has (ZooKeeper
// excepted for a candidate whose campaign failed: zklock documents that
// its node may hold the lock for nobody until deleted; Redlock excepted
// for a term followed by the same candidate's grant with a higher token:
// redlock documents that Holder may report a grant whose token is being
// settled with a lower one), closes its
// channel during the run, does not report within 30s the term a round
// ends with (held until it has) or, on server-kill, the leader elected
// after the restart, or does not report "no leader" within 30s of the
// last resignation. On pause the frozen leader's term must have ended
// before the other candidate was elected: its local deadline as it stood
// when the leader was stopped (Term.Deadline, read by the worker until the
// stop) must come before the other's Campaign returned, both instants read
// on the machine's wall clock, which the harness and its workers share.
//
// # Permits
//
// The permit rows (permit/pause and permit/partition) run the same
// scenarios on package semaphore's permits, of a semaphore of limit 1
// named by the row's key: a Scenario with Permit set makes acquire take
// the permit and release give it back. A permit of a limit of 1 excludes
// every other grant of the key, and its token is above every earlier
// one, so the checkers need nothing new; the pause row also checks, as
// for terms, that the stopped holder's deadline came before the next
// grant. On PostgreSQL both rows run in pglock's lease mode, whose
// permits are rows that expire by the server's clock (the partition row's
// proxy is between the holder and its pool's connections). Redlock and
// the gateway grant no permits, and file:// permits have no TTL: those
// backends have no permit row.
//
// # Shared locks
//
// The shared rows (shared/writer-pause, shared/writer-partition and
// shared/reader-pause) run on package rwlock's read/write locks, on every
// backend whose Backend implements driver.SharedLocks (the others are
// listed as not run, with the reason): a Scenario with RW set makes
// acquire take the write lock of the read/write lock named by the row's
// key (the key's exclusive lock, asked with distlock.WithWriter), or a
// read lock (distlock.WithShared) where the scenario asks one. The writer
// rows are pause and partition on write locks, with two readers holding
// read locks before each holder's grant: the holder's write lock, tried,
// must be refused, then is asked, seen waiting (a probe's read-lock try is
// refused, as no reader passes a waiting writer), and granted after the
// readers release; during the fault the readers ask again, once the other
// writer is granted, and wait for it. The mutex model is the write
// locks'; the token model takes every grant; an overlap is a write lock
// proven held with any other grant of its key. In shared/reader-pause a
// reader, having checked its read lock, is stopped before its read past
// its TTL; a writer is granted and writes; the reader resumes and reads.
// A read that saw a write with a token above the reader's own, used as
// read under its lock, is a violation (a stale read); in the fenced run
// the reader validates the read after making it against the store's
// highest admitted token for the resource (fence.Register.Highest) and
// discards it when that is above its own. As on the pause rows of terms
// and permits, the reader's deadline as it stood when it was stopped must
// come before the writer's Acquire returned. On PostgreSQL the shared rows
// run in pglock's lease mode (a session-mode holder, stopped or cut off,
// keeps its connection's hold); through the gateway a grant, read or
// write, is its session's, which the gateway ends after its TTL. On file://
// no grant has a TTL: there is no shared row.
//
// # Partitioning
//
// The partition row (partition/member-partition) runs package
// partition's units under the partition fault, on every backend the lock
// rows' partition runs on (not file, where there is no network, nor
// PostgreSQL, whose session cut off keeps its locks and whose lease mode
// has no partition row): four workers are members of one group, named by
// the row's key, of 16 units, and each writes, for every unit it owns, the
// unit's resource (the row's resource, "-u", the unit) with the unit's
// token, paced, checking the unit's lock before each write: a fence per
// unit. A member takes its units on its own, so the worker reports each
// unit's grant, its end (the unit lock's context) and each write as they
// happen; the harness stamps a grant on arrival, its call being when the
// member was started. Once the group has settled (every unit held, four
// each), member A's writers are made stubborn (they ignore their
// contexts and write unchecked), A is cut off from the service (a proxy
// blackhole; on Redlock from 3 of the 5 nodes), and the round lasts until
// the other members have taken every unit A held and A has written to each
// of them with its old token after a newer owner's write. The unfenced
// store takes those writes; the fenced one must refuse every one. The
// mutex and token models check the units' grants as they check locks.
//
// # Nemesis
//
// The scenarios inject one fault at a time; the nemesis mode (TestNemesis,
// RunNemesis) mixes them, overlapping in time, at random from a seed. A
// schedule (NewNemesisPlan, a pure function of the seed, the length and
// the target's shape) is drawn per channel: each worker's process (paused
// with SIGSTOP, then continued), its links to the lock service (cut by a
// proxy blackhole, delayed, or losing the service's replies), its link to
// the store (delayed: a write times out in the worker and lands later),
// and the servers (one paused, or killed with SIGKILL and restarted with
// its data, one at a time so that a quorum stays up). Faults follow one
// another within a channel, with random gaps and spans of up to 2.5 TTLs
// (a holder's pause or cut-off from 1.2 to 3 TTLs, so that its lease
// lapses), and the channels are independent, so that faults of different
// channels overlap. The workload is three workers cycling through one
// key's lock (acquire, one to three read-modify-writes of one resource,
// each followed by up to a quarter of a TTL of work, release), two
// candidates doing the same on an election, three workers doing the same
// with permits of one semaphore of 2 permits with slots, each permit
// writing its slot's resource (a fence per slot; not on Redlock nor the
// gateway, which grant no permits, nor on ZooKeeper, whose permits have
// no slots), and three members of one partition
// group of 6 units, each writing every unit it owns with the unit's token
// (a fence per unit), in stubborn spells ignoring the units' contexts,
// and two workers holding lock sets (Client.AcquireAll) of two or three
// of three keys, one of them the lock workers' key, each round of writes
// writing every part's resource with the part's token (a checked write
// goes out only while the whole set is live; half the holds are
// stubborn, as above). The recipes' and the sets' workers are the schedule's
// last channels, drawn after the servers', so that adding them left a
// seed's other faults as they were.
// In half the holds the writes
// are stubborn: they go out whether the lock is live or not, as from a
// holder that ignores its lock's context, so that a lapsed holder's late
// writes reach the store and only the fence stands between them and the
// resource. What a fault makes the library
// report (a lost lock, an acquisition that times out, a write refused) is
// part of the workload; only a worker gone, or a server that does not
// restart, fails the run. A target's store modes (unfenced, fenced, and
// fenced in PostgreSQL on PostgreSQL) run at once on its servers, under
// the one schedule (RunNemesisModes): each mode has workers, links, keys
// and a history of its own, a server's fault reaches them all at once,
// and a worker's fault reaches the worker of the same index in each mode
// (whose workload draws from the same seed), so that the modes' rows
// compare fault for fault and a target's run takes the time of one mode.
//
// Each backend runs the deployment it promises to survive: Redis with
// appendfsync always, a 3-member etcd, a 3-server ZooKeeper ensemble,
// Redlock over 5 independent Redis with appendfsync always (and, as
// redlock-empty, over 5 without persistence, whose killed nodes restart
// empty: the seed marker's case), PostgreSQL in
// lease mode with fsync on, PostgreSQL in session mode (paused, never
// killed: a session's locks die with the server, see the server-kill
// rows), the gateway over a local lock directory (neither killed nor
// paused, see gateway-kill), and the local lock directory (holder pauses
// and store delays only: there is no network and no server); all but
// Redis, etcd and file with -nemesis.backends. Every run is
// judged (NemesisResult.Judge), in every store mode, on what the history
// proves whatever the timing: no two grants of one key proven held at once
// (the mutex model and the count, for locks, terms and permits' slots:
// one leader), no token regression (the token model and the count; the
// units' grants, which their members report stamped from the member's
// start, are left out of both models: their overlaps are judged by
// CheckUnits and the count, and their tokens by CheckUnits, which
// compares each grant's token with those of the unit's grants proven
// live entirely before it), no more
// permits proven live at one instant than the semaphore's limit
// (CheckPermits), never two owners of a unit proven live at one instant
// (CheckUnits), and, with the fence, no stale write accepted and a
// linearizable register. The unfenced
// baseline is reported, never required to bite: whether a random schedule
// makes a stale write land after a newer one depends on timing. Lost
// updates are reported, not judged (a fence refuses stale writes, not an
// increment computed from a read that a newer holder's write overtook).
// The servers' wall clocks jump too (server-clock-jump: one server's clock
// at a time, by 1.2 to 3 TTLs, forward two times in three, for a span,
// then back), where testserver's clock shim reaches the clock the server
// expires leases by: Redis and PostgreSQL in lease mode (now()). A step
// forward expires at once the leases the server wrote before it: the
// overlaps it explains (the older grant asked for before the step and
// renewed last before it, the newer granted after it; see
// ClockSteps) are reported, not judged, and the fence is what must hold.
// A step excuses those overlaps and nothing else: the mutex models are
// judged again with the older grant of each explained overlap proven live
// only up to its step (MutexJudged), so that a grant made before the
// step, or on another key, still counts.
// Redlock's nodes are not jumped: one node's step frees a grant only if
// the grant stood on a bare majority including that node, which the
// history does not record, so an overlap could not be told from a
// defect (the single-fault clock-jump row shows the case). For each fault that cut a holder off while it held, the
// table gives the time from the fault to the holder's library reporting
// the lock lost, and to the next grant to another worker (p50 / max).
// A ZooKeeper member is cut off from its peers too (server-peer-cut: its
// links to and from the other servers blackholed in the proxies the
// members reach each other by, testserver.WithPeerAddress, for a span,
// while its clients still reach it; a channel of its own, so it may
// overlap another server's pause or kill, leaving no quorum for a
// while). It is a partial partition: every quorum link is cut, but an
// election link that ZooKeeper opened back to the address a server
// announces itself at passes no proxy and survives (see
// NemesisServerPeerCut). An etcd member is cut off from its peers the
// same way, both ways and whole: each member advertises a proxy to its
// peers (testserver.WithEtcdPeerAddress), and a cut blackholes the
// member's own proxy and, in the other members' proxies, the connections
// it dialed, told apart by the process that holds their other end.
// The link between two servers alone is cut too (server-link-cut, etcd
// and ZooKeeper, a channel of its own put off while a peer cut is on):
// a bridge partition, where each of the two still reaches the third,
// and may lead it. In etcd the cut blackholes, in each one's proxy, the
// connections the other dialed; in ZooKeeper the proxies of the links
// between the two (an election link that passes no proxy survives).
// A ZooKeeper follower's quorum link is stalled one way too
// (server-leader-stall): what its leader sends is held back while what
// it sends flows. zklock's confirmations cover that case only where
// (syncLimit + ½) × tickTime is within a quarter of the session timeout
// (see its package documentation), so the nemesis mode's ensemble runs
// with syncLimit 2 (ticks of 200ms, sessions of 2s): ZooKeeper's default
// of 5 ticks of 2s would not be covered.
// Not in the mix: clock jumps of etcd (a Go binary, which the preloaded
// shim does not reach; its leases run on the leader's monotonic clock), of
// ZooKeeper (sessions expire by the servers' monotonic clock) and of the
// workers (no shim moves a Go worker's clock), and read/write locks.
//
// Every run logs its seed and the command that replays it:
//
//	cd torture && go test . -run 'TestNemesis' -args -nemesis.seed N
//
// A replay draws the same schedule: the same faults, on the same workers
// and servers, at the same offsets from the start, with the same spans and
// delays; an action runs no earlier than its offset, later if the one
// before it (a server's restart) took longer. The workers draw their
// choices (writes per hold, which holds are stubborn) from streams of the same
// seed, but what happens between the processes is not replayed: which
// worker is granted when, how long the servers take, when a lease lapses,
// where in a worker's command a SIGSTOP lands. A replay is the same
// pressure, not the same interleaving; a violation is judged from the
// run's own history, and the failing run logs its notes (the overlapping
// grants, say) with the seed. The short mix, which CI runs with
// the rest of the package, draws a new seed per run (each run explores
// another schedule; no verdict it judges can fail on timing alone, so a
// failure is a bug to replay with its seed) and runs 6s of faults per
// backend on Redis, etcd and file, about 40 seconds in all.
// The full mode,
//
//	cd torture && go test . -run 'TestNemesis' -timeout 60m -args -nemesis.duration 5m -nemesis.backends etcd
//
// runs each schedule for the given length and writes the table (faults
// injected by kind, grants and terms, failed acquisitions, writes, stale
// writes attempted, refused and accepted, lost updates, the permits' and
// the units' grants, most holders at once and stale writes, the verdicts
// per invariant) to NEMESIS.md (-nemesis.out), not to REPORT.md.
//
// # One clock, conservative intervals
//
// Every event is stamped by the harness process with one monotonic Clock:
// the Store stamps its reads and writes when the request arrives and when
// the reply leaves; commands to workers are stamped when sent and when
// their answer arrives, so each interval contains the moment the operation
// took effect. A grant ends (KindEnd) when its holder's lock context is
// cancelled, as the worker reports; it counts as held only up to the last
// instant it was proven live: after a store reply, the worker checks that
// its lock's context is not done and that its local deadline has not
// passed, and the store's reply time is then a time at which the grant was
// certainly still held. An overlap reported by the checkers is therefore
// proven, never inferred from a slow report.
//
// # Checkers
//
// Porcupine checks three small models, partitioned by lock key or
// resource: mutex (acquire and end alternate: no two holds overlap), tokens
// (each grant's token is above the last), and register (a read returns the
// last admitted write; a write whose token is below the highest admitted
// must have been refused). Plain counts complete them: proven overlaps,
// stale writes attempted, refused and accepted, lost updates (acknowledged
// increments missing from the final value), token regressions, orphaned
// grants, and loss-detection latency (from the fault to the holder's
// context being cancelled, on the harness clock).
//
// # Running it
//
// The package is a module of its own (github.com/distlock/distlock/torture,
// with a replace directive to the repository root), so that porcupine and
// the harness are no dependency of the library. From the repository root,
//
//	cd torture && go test .
//
// runs every scenario for one round, and the nemesis mode's short mix (see
// Nemesis), in a few minutes (scripts/test.sh runs it, with go vet, under
// -race), and fails if a baseline does not bite, if a fenced store accepts
// a stale write, if a guard that should hold does not, or if tokens
// regress where the backend promises they do not. The full run,
//
//	cd torture && go test . -run TestTorture -timeout 60m -args -torture.full
//
// runs more rounds and writes REPORT.md and report/index.html (a timeline
// of every run), which are committed, and report/histories/ (porcupine's
// visualization of every history, megabytes), which is not. A full run of
// some rows (-run 'TestTorture/BACKEND/SCENARIO/MODE', MODE optional)
// replaces those rows and their timelines in REPORT.md and index.html and
// keeps the others; REPORT.md lists under Runs each run and the rows it
// still gives, and under Not run the code's rows it has none of yet.
// The servers come from testserver; without them the tests skip,
// or fail under CI=true.
//
// The package is a test harness: its API takes a testing.TB, starts
// processes and servers, and is Linux-only where it stops processes.
// Runs, Workers and Stores are safe for concurrent use.
package torture
