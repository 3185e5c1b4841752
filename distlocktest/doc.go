// Package distlocktest is the conformance suite every driver.Backend must
// pass. The backends in this repository run it against real servers; a third
// party can run it against its own backend:
//
//	func TestConformance(t *testing.T) {
//		distlocktest.Run(t, func(t *testing.T) driver.Backend {
//			return mybackend.New(connect(t)) // a fresh connection each call
//		})
//	}
//
// The factory is called once per simulated process: each call must return a
// Backend with its own connections or session, as a separate host would have;
// an in-process backend returns one more client of a service that every call
// of one Run shares. Resources it opens should be closed with t.Cleanup. The
// suite also closes backends itself, through their Close() error method (see
// driver.Backend), and fails one that has none.
//
// Each test checks a sentence of the contract in distlock's package
// documentation, with deadlines on every wait and a goroutine-leak check at
// the end. Tests use unique keys, so a shared server can be reused.
//
// RunElection is the conformance suite of package election, with the same
// factory and options: many candidates campaigning, resigning and
// abandoning terms, checked for one live term at a time, increasing and
// fenced tokens, and an Observe in term order.
//
// RunSemaphore is the conformance suite of package semaphore, for a
// backend that grants permits (driver.Semaphores), with the same factory
// and options: many holders never above the limit and reaching it, a
// stored limit that refuses another (kept by a waiter alone too; skipped
// with WithUnstoredLimit), unique and increasing tokens, slots, lost,
// revoked (WithRevoke) and abandoned permits given back, and randomly
// cancelled acquires that leave no permit behind.
//
// RunHolder tests a backend's holder of one key (driver.HolderReader,
// driver.HolderWatcher, a lease's driver.OwnerSetter), with the same
// factory and options: exact keys, an owner change seen by another
// process and owner-checked, and a watch woken by the service, not by
// polling.
//
// Faulty wraps any Backend with switchable faults; the suite uses it to cut
// a holder off from the service, and users can use it in their own tests.
package distlocktest
