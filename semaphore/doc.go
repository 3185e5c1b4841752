// Package semaphore is a counting semaphore over any distlock Client whose
// backend grants permits (driver.Semaphores): up to a limit of holders at
// once, in any number of processes, each permit a lease with its own
// fencing token.
//
//	s, err := semaphore.New(client, "exports", 3)
//	p, err := s.Acquire(ctx) // blocks until one of the 3 permits is free
//	err = export(p.Context(), p.Token())
//	err = p.Release(ctx)
//
// TryAcquire tries once, Do runs a function while it holds a permit, and
// Holders lists the live permits. With WithSlots, each permit also names
// its slot in [0, limit).
//
// # Guarantees
//
// A permit is a lease like a distlock.Lock, renewed by the Client, and has
// what a Lock has: while its context is not done, no more than the limit
// of permits can have been granted, judged on the local monotonic clock
// with the lease's clock drift and safety margin allowed for; the context
// is cancelled, and Err reports the permit lost, before the service can
// grant it to another. Release is owner-checked. An Acquire whose context
// ends returns an error and never a permit: its place in line, and a
// permit granted to it as it ended, are given back, with retries, or
// lapse within their TTL.
//
// The limit is stored with the semaphore by the first holder or waiter,
// and kept while a permit is held or awaited: Acquire refuses a permit
// naming another limit with an error matching distlock.ErrInvalidOption
// (a *driver.LimitError), never granting more than the stored limit. Once
// no permit is held or awaited, the next holder sets the limit afresh. A
// backend whose layout stores no limit (its package documentation says
// so, and Holders reports driver.UnknownLimit) cannot refuse a client
// that names another: there the guarantee holds among clients that name
// the same limit.
//
// # Not guaranteed
//
//   - That a holder is not paused between checking its permit and acting:
//     a pause past the permit's end lets one more holder act. Only the
//     storage can refuse the late write (see Fencing).
//   - That Holders is still true when the caller acts on it.
//   - Fairness between processes beyond what the backend gives (see its
//     package documentation, "Waiting").
//   - The backend's own limits: a service that loses its state can grant
//     more than the limit and reuse a token.
//
// # Durability
//
// A semaphore keeps nothing of its own: its permits, their tokens and
// its limit last as the backend's grants do (see the backend's package
// documentation, "Durability").
//
// # Waiting
//
// Acquire waits on the backend's signal, never by polling alone. The
// backend serves waiters in arrival order, and a permit given back
// (released, expired, lost with its holder's session) goes to the first
// waiter; where the service can address one waiter, it alone is woken
// (else every waiter tries again, and only the first is granted; see the
// backend's package documentation). A holder that dies gives its permit
// back within its TTL, or when its session ends; a waiter that dies loses
// its place in line likewise.
//
// # Fencing
//
// Every permit's token is unique, and greater than the token of every
// grant before it on the semaphore's key. Several permits live at once, so
// a single fence.Register per resource would refuse the older holders:
// fence what a permit owns alone. With WithSlots, a permit's token is
// greater than every earlier token of its slot, so that one Register per
// slot (the resource the slot stands for) refuses a slot's late holder.
//
// # Layout
//
// The semaphore named NAME is kept at the key KeyPrefix+NAME, in the
// backend's layout for permits (see the backend's package documentation,
// and "Semaphores" in package driver). A lock of the same key is another
// grant: it neither counts against the limit nor excludes permits.
//
// A Semaphore is safe for concurrent use, and so is a Permit.
package semaphore
