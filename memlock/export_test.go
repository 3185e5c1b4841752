package memlock

// Queued returns the number of keys whose turn an acquirer of b has or
// awaits.
func Queued(b *Backend) int { return b.queue.Len() }

// Waiting returns the number of acquirers of key waiting for its turn,
// besides the one that has it.
func Waiting(b *Backend, key string) int { return b.queue.Waiting(key) }
