// Package memlock is an in-process lock service with the semantics of a
// distributed one: leases that expire unless refreshed, fencing tokens,
// owner-checked refresh and release, FIFO waiting and loss reports. It is
// meant for users' unit tests and for code that needs the distlock API
// inside one process.
//
//	locks, _ := distlock.New(memlock.New(), distlock.WithTTL(time.Second))
//
// # Guarantees
//
// A grant excludes every other grant of its key until it is released or its
// TTL, counted from the grant or the last refresh, runs out. Refresh and
// Release are owner-checked: once a grant has expired they change nothing
// and report distlock.ErrLockLost. Expiry is silent, as on a TTL service
// such as Redis: the holder learns of it from its Client's local deadline
// or from a failed refresh. Revoke drops a grant the way a session service
// does when a session ends: the holder's OnLost is called before anyone
// else can be granted the key; it drops a key's permits too. List shows
// locks only, one holder per key as driver.Lister says; a key's permits
// are read with Permits.
//
// Permits of a semaphore (package semaphore, driver.Semaphores) are leases
// of the same kind: at most the semaphore's limit of them live at once on
// a key, each expiring, refreshed and released on its own. The limit is
// kept with the semaphore while a permit is live or awaited, and a permit
// naming another is refused.
//
// # Not guaranteed
//
// Exclusion holds within one Backend, which lives in one process: it
// protects nothing shared with another process. Each key's token counter is
// kept for the life of the Backend (tokens never repeat), so memory grows
// with the number of distinct keys ever locked. For the same reason it has
// no OpenURL or Schemes, unlike the other backends: a URL names a service
// that several processes reach, which a memlock Backend is not.
//
// # Durability
//
// None: the Backend's state is its memory. A new Backend starts every key's
// tokens again from 1.
//
// # Waiting
//
// Waiters of a key are served in arrival order. The first waits for the
// holder to go, and a release, an expiry or a revocation hands it the key
// at once, without polling. A try (distlock.TryAcquire) fails while the key
// is held or awaited.
//
// Waiters for a permit are served in arrival order too: a permit given
// back (a release, an expiry) is handed at once to the first waiter
// alone. A try fails while every permit is held or a waiter is in line.
// A waiter whose context ends leaves the line; a permit handed to it as
// it left goes to the next.
//
// A watch of a key's holder (Client.Watch, an election's Observe) is woken
// at every change: a grant, a release, an expiry, a revocation, a new
// owner.
//
// # Fencing
//
// Tokens are a counter per key, starting at 1 and incremented at each grant,
// a lock's or a permit's. A permit's slot (semaphore.WithSlots) is the
// lowest free when it is granted.
// Storage guarded with package fence refuses a holder whose lease expired
// once the next holder has written with its larger token.
//
// # Testing with fake time
//
// Time is the standard library's, so tests can make leases expire without
// sleeping by running inside a testing/synctest bubble (create the Backend
// and the Client inside the bubble).
//
// A Backend and its leases are safe for concurrent use; a Backend starts a
// timer per held key or permit and no goroutine. Close ends the waiters and refuses
// later acquisitions; held leases last until released or expired.
package memlock
