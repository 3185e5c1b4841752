package redlock

import "time"

// Hooks for this package's tests. Set them before b's first use.

// SetRemarkPeriod replaces how often b's watches set their markers again.
func SetRemarkPeriod(b *Backend, d time.Duration) { b.hooks.remark = d }

// HolderSending reports whether a SUBSCRIBE or an UNSUBSCRIBE of the
// holder channel ch is on its way to a node of b.
func HolderSending(b *Backend, ch string) bool {
	b.mu.Lock()
	s := b.sub
	b.mu.Unlock()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sending[ch] != nil
}
