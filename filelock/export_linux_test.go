//go:build linux

package filelock

// Subscriptions returns the number of inotify subscriptions of b: two for
// each waiting reader (its lock file and its key's writers file).
func Subscriptions(b *Backend) int {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.w.inst == nil {
		return 0
	}
	return b.w.inst.n
}
