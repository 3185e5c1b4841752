// Package memlock is an in-process lock service with the full semantics of
// a distributed one: leases that expire unless refreshed, fencing tokens
// that increase per key, owner-checked refresh and release, FIFO waiting
// with push hand-off, and loss reports.
//
// It is meant for users' unit tests and for code that needs the distlock
// API inside one process. It keeps every key's token counter for the life of
// the Backend (tokens never repeat), so memory grows with the number of
// distinct keys ever locked.
//
// Time is the standard library's, so tests can make leases expire without
// sleeping by running inside a testing/synctest bubble (create the Backend
// and the Client inside the bubble).
//
// Expiry is silent, as on a TTL service such as Redis: the holder is not
// told, and learns of it from its Client's local deadline or from a failed
// refresh. Revoke drops a grant the way a session service does when a
// session ends: the holder's OnLost callback is called.
package memlock
