//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gateway

// unreadEntries: no backend of this system lists in part.
func unreadEntries(error) (unread []error, listed, partial bool) { return nil, false, false }
