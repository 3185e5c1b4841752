package zklock

// SortNodes sorts lock node names into queue order, for tests.
func SortNodes(children []string) []string {
	sortNodes(children)
	return children
}

// Wakeups returns how many watch events have woken a waiter of b.
func (b *Backend) Wakeups() int64 { return b.wakeups.Load() }
