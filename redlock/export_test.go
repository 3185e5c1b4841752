package redlock

import "time"

// Hooks for this package's tests. Set them before b's first use.

// SetRemarkPeriod replaces how often b's watches set their markers again.
func SetRemarkPeriod(b *Backend, d time.Duration) { b.hooks.remark = d }
