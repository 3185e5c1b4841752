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

// OnSecret has f called with the secret of every try of b.
func OnSecret(b *Backend, f func(secret string)) { b.hooks.secret = f }

// ScriptHashes returns the SHA-1 of each of the package's scripts, by
// the name of its file without ".lua".
func ScriptHashes() map[string]string {
	return map[string]string{
		"acquire": acquireScript.Hash(), "raise": raiseScript.Hash(), "refresh": refreshScript.Hash(),
		"refresh_many": refreshManyScript.Hash(), "release": releaseScript.Hash(), "mark": markScript.Hash(),
		"seed": seedScript.Hash(), "peek": peekScript.Hash(), "leave": leaveScript.Hash(), "pass": passScript.Hash(),
		"watch": watchScript.Hash(),
	}
}

// tomb returns the tombstone key of the grant with secret (see tombOf).
func (k lockKeys) tomb(secret string) string { return k.tombOf([]byte(secret)) }
