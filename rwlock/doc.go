// Package rwlock is a read/write lock over any distlock Client whose
// backend grants shared locks (driver.SharedLocks): any number of readers
// at once, or one writer, in any number of processes, each grant a lease
// with its own fencing token.
//
//	rw, err := rwlock.New(client, "catalog")
//	r, err := rw.RLock(ctx) // shares with other readers
//	err = serve(r.Context())
//	err = r.Release(ctx)
//
//	w, err := rw.Lock(ctx) // waits for every reader and writer
//	err = rebuild(w.Context(), w.Token())
//	err = w.Release(ctx)
//
// TryRLock and TryLock try once; RDo and Do run a function under a read
// or a write lock; Readers and Writer say who holds it.
//
// # The key
//
// The read/write lock named NAME is the key NAME itself, with no prefix:
// its write lock is the key's ordinary lock, so that Client.Acquire of
// NAME, `distlock run NAME` and the gateway's locks of NAME exclude its
// readers and are excluded by them, as flock(1) without -s excludes
// flock -s. Its read lock is Client.Acquire of NAME with
// distlock.WithShared(true).
//
// # Guarantees
//
// A read or write lock is a distlock.Lock, renewed by the Client, with
// what a Lock has: while a write lock's context is not done, no other
// lock of the key, read or write, can have been granted, and while a read
// lock's context is not done no write lock can have been, judged on the
// local monotonic clock with the lease's drift and safety margin allowed
// for. Each context is cancelled, and Err reports the lock lost, before
// the service can grant what it excluded.
//
// Askers are served in arrival order: readers arriving together share,
// and a writer that waits blocks the readers who come after it, so that a
// stream of readers never starves a writer. Every grant's token, a
// reader's or a writer's, is unique and greater than every earlier
// grant's on the key, so a fence of the resource (package fence) admits
// writers in order and refuses one whose lock has lapsed.
//
// # Reentrancy
//
// A lock asked under the context of a lock of the same key re-enters it,
// as distlock's locks do: a read lock under a read or write lock's
// context, or a write lock under a write lock's. A write lock asked under
// a read lock's context is refused with distlock.ErrUpgrade rather than
// waiting for itself: release the read lock and take the write lock, then
// check again what was read.
//
// # Not guaranteed
//
//   - That a holder is not paused between checking its lock and acting: a
//     pause past the lock's end lets a writer in. Fence the writes; and
//     where a stale read matters, validate it after reading: a writer
//     granted after the reader has a greater token, so a read is sound
//     when the resource's highest admitted token (fence.Register.Highest)
//     is not above the reader's own (torture's shared/reader-pause row
//     shows a paused reader caught so).
//   - Upgrading or downgrading a held lock in place.
//   - Shared locks on a backend that does not grant them: Redlock's
//     quorum refuses them (errors.ErrUnsupported), since a quorum of
//     independent nodes cannot prove that readers and writers exclude.
//
// Each backend's package documentation says how it keeps shared locks
// (its layout, how it waits) and which other clients share them:
// ZooKeeper's Curator InterProcessReadWriteLock, PostgreSQL's
// pg_advisory_lock_shared.
package rwlock
