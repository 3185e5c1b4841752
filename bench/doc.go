// Package bench measures distlock against the lock libraries people use
// instead, on real servers, in one run, and writes the ratios to
// RESULTS.md.
//
// It is a module of its own (github.com/distlock/distlock/bench), so the
// peer libraries it measures never become dependencies of distlock.
//
// # Running
//
//	cd bench
//	go test ./...                                      # smoke run: seconds, writes to a temporary directory
//	go test -run TestResults -full -timeout 60m .      # full run: rewrites RESULTS.md and plots/
//
// The smoke run takes every measurement with tiny sizes and checks that
// each one works: every subject completes cycles, no two holders of a key
// ever overlap, no lock is lost while held, and the report names every
// subject. It never touches the committed RESULTS.md. Servers come from
// testserver: a missing redis-server, etcd, ZooKeeper or
// PostgreSQL skips the run, or fails it under CI=true.
//
// # What is measured
//
// Subjects are the rows: distlock backends through distlock.Client, peer
// libraries at their documented defaults, a floor of raw commands and one
// round trip per service (see Subjects). Each measurement runs its subjects
// in rounds, every subject once per round in a rotating order (the
// uncontended cycles in a random order per turn), so that noise on the
// shared machine hits all of them alike:
//
//  1. uncontended acquire+release latency (p10, p50, p99), with the
//     requests each cycle sends;
//  2. throughput: goroutines on distinct keys, cycles per second;
//  3. hand-off under contention: waiters (each an instance of its own, as
//     processes would be) on one key, each holding it for a millisecond;
//     the time a hand-off wastes, fairness, and requests per hand-off;
//  4. the same with more waiters (the herd);
//  5. held locks: goroutines, heap and renewal traffic of a Client holding
//     thousands of locks;
//  6. elections: candidates (each an instance of its own) of one election,
//     the time from a leader's resignation to the next leader's Campaign
//     returning; distlock's package election over each distlock row's
//     Client, and etcd's concurrency.Election;
//  7. semaphores: a permit cycle of package semaphore against the same
//     Client's lock cycle, uncontended, and instances sharing a few
//     permits, on each distlock row whose backend implements
//     driver.Semaphores (checked at run time; the others are reported as
//     granting no permits);
//  8. shared locks: a read-lock cycle of package rwlock against the same
//     Client's lock cycle, on each distlock row whose backend grants
//     shared locks (driver.SharedLocks; TestSharedRows, not part of the
//     full run's RESULTS.md);
//  9. partitioning: a group of package partition (4 members, 16 units)
//     over each distlock row's backend, the time for it to settle (every
//     unit held by its planned member) after a member joins and after
//     that member is killed (its connections blackholed in fault proxies,
//     so its locks lapse by TTL; not on memlock, filelock and pglock's
//     session mode, where no connection's death lets a lock lapse), and
//     each time as a ratio of the package's stated bound (reconcile×1.25
//     plus the minimum hold for a join, plus the TTL for a kill, or on
//     ZooKeeper the session timeout, which its locks last);
//     TestPartitionRows, not part of the full run's RESULTS.md (it waits
//     out the reconcile interval, minimum hold and TTL on every trial:
//     minutes);
//  10. the command: `distlock run KEY -- true` against `flock FILE true`,
//     whole processes from fork to exit, interleaved, with the binary
//     built from cmd/distlock (a few seconds; TestCLIRun -cli N alone).
//
// Adding a backend or a peer is adding one entry to Subjects. Entries with
// NotBuilt set are reported as "not built yet".
//
// Nothing in this package is safe for concurrent use unless stated; it is
// driven by one test.
package bench
