package memlock

// Queued returns the number of keys whose turn an acquirer of b has or
// awaits.
func Queued(b *Backend) int { return b.queue.Len() }

// Waiting returns the number of acquirers of key waiting for its turn,
// besides the one that has it.
func Waiting(b *Backend, key string) int { return b.queue.Waiting(key) }

// PermitWaiters returns how many AcquirePermits wait for a permit of key.
func PermitWaiters(b *Backend, key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.keys[key]; e != nil && e.sem != nil {
		return len(e.sem.waiters)
	}
	return 0
}
