package memlock

// Queued returns the number of keys whose turn an acquirer of b has or
// awaits.
func Queued(b *Backend) int { return b.queue.Len() }
