package pglock

import (
	"context"
	"strings"
	"time"
)

// ParseURL is OpenURL's parse step, which does no I/O, for the fuzz test.
func ParseURL(raw string) error {
	_, _, _, err := parseURL(raw)
	return err
}

// LivePauses returns how many pauses of LeaseMode waiters have begun while
// the listener was live: a waiter counted has tried, found the key held,
// and waits for a notification.
func (b *Backend) LivePauses() int64 { return b.livePauses.Load() }

// OnGrabbed has f called when a lease-table grab has been granted, before
// the grant is registered, until the test ends.
func OnGrabbed(t interface{ Cleanup(func()) }, f func()) {
	grabbed = f
	t.Cleanup(func() { grabbed = nil })
}

// ReleaseSQL is the session-mode release statement, for the cycle's
// breakdown, naming the objects of schema public, where its server has
// them.
var ReleaseSQL = strings.ReplaceAll(releaseSQL, schemaMarker, "public")

// Abandon runs the clean-up of a lease-table try whose outcome is unknown,
// for grant, with a tombstone kept for ttl at least.
func (b *Backend) Abandon(ctx context.Context, key, grant string, ttl time.Duration) error {
	return b.abandonRow(ctx, key, grant, ttl, 0)
}

// SetWatchPoll sets how often a SessionMode watch asks which session
// holds its key's lock, until the test ends.
func SetWatchPoll(t interface{ Cleanup(func()) }, d time.Duration) {
	old := watchPoll
	watchPoll = d
	t.Cleanup(func() { watchPoll = old })
}

// QueueWaiting returns how many acquirers of b wait for key's turn in
// session mode, not counting the one that has it.
func QueueWaiting(b *Backend, key string) int { return b.queue.Waiting(key) }

// OnWriterQueued has f called when a waiting LeaseMode writer has its
// place in its Backend's queue, before it waits there, until the test
// ends.
func OnWriterQueued(t interface{ Cleanup(func()) }, f func(key string)) {
	writerQueued = f
	t.Cleanup(func() { writerQueued = nil })
}

// RowQueueWaiting returns how many acquirers of b wait for key's turn in
// lease mode, not counting the one that has it.
func RowQueueWaiting(b *Backend, key string) int { return b.rowQueue.Waiting(key) }
