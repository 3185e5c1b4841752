// Package backend holds what every backend package of distlock repeats: the
// checks of Acquire's input (CheckAcquire, CheckTTL, Canceled), the
// ErrClosed of a backend (ClosedError), whether a backend is open and the
// goroutines its Close waits for (Tracker), and the background retries of
// clean-ups (Retry, on the root package's RetryStrategy). The per-key queue
// of a process's acquirers is package keyqueue.
//
// # Outline of a backend's package documentation
//
// A backend's doc.go opens with one paragraph: the service, what the backend
// is for, and a short example when it needs setting up. Then come these
// sections, with these headings, in this order, so that backends can be
// compared section by section:
//
//   - "# Guarantees": what holds while a grant is valid, from which
//     confirmation its validity is timed (or that it has no time bound), and
//     how a loss is reported (OnLost, or only by the Client's deadline).
//   - "# Not guaranteed": what a user must not assume: pauses longer than
//     the usable TTL, clock faults beyond the drift, operators deleting the
//     service's state, fairness between processes, and whatever else the
//     service does not promise.
//   - "# Durability": what the service must keep for grants to stay
//     exclusive and tokens to keep increasing (fsync settings, no failover
//     to a lagging replica, a directory that survives reboots).
//   - "# Waiting": the service's signal that wakes a waiter, the polling
//     that covers a missed signal, and the order waiters are served in,
//     within one process (keyqueue) and between processes.
//   - "# Fencing": where the token comes from and why it increases, and the
//     storage-side checks the package offers besides package fence (an
//     atomic check in the service itself, when it has one).
//
// Sections particular to a backend (key layout, URLs, goroutines) follow
// these. Notes on how the code works belong in comments next to that code,
// not in the package documentation, and the documentation speaks only of
// what exists.
package backend
