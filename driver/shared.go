package driver

import "context"

// SharedLocks is implemented by backends that grant shared (read) locks
// (see "Shared locks" in the package documentation). The Client refuses
// shared locks, with an error matching errors.ErrUnsupported, on a
// backend that lacks it, rather than granting an exclusive lock in their
// place.
type SharedLocks interface {
	// AcquireShared asks for a shared grant of key. It is Backend.Acquire
	// for a reader: opts mean what they mean there (TTL, Wait, Owner,
	// OnLost; Election and Writer are ignored), and it checks its input
	// with CheckAcquire first. A shared grant shares key with every other
	// shared grant of it, and excludes (and is excluded by) the exclusive
	// grants of Backend.Acquire on the same key. Without opts.Wait it
	// fails with ErrNotAcquired when an exclusive grant holds key, or
	// when one waits for it.
	AcquireShared(ctx context.Context, key string, opts AcquireOptions) (Lease, error)

	// Readers returns the live shared grants of exactly key (not of keys
	// it is a prefix of), sorted by token, with Shared set. An exclusive
	// holder of key is not among them: HolderReader and Lister report it.
	Readers(ctx context.Context, key string) ([]Holder, error)
}
