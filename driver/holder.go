package driver

import (
	"context"
	"fmt"
	"unicode/utf8"
)

// HolderReader is implemented by backends that can read the holder of
// exactly one key. The Client's Holder and Watch use it, and fall back to
// Lister (keeping only the key itself) when a backend lacks it or it
// returns an error matching errors.ErrUnsupported.
type HolderReader interface {
	// Holder returns the current grant of key, and held false when the
	// key is free. It reads key itself and never another key that key is
	// a prefix of ("svc/leader" is not "svc/leader2").
	Holder(ctx context.Context, key string) (h Holder, held bool, err error)
}

// HolderWatcher is implemented by backends whose service can announce
// that the holder of one key changed, so that a watcher of the key is
// woken by the service rather than by polling.
type HolderWatcher interface {
	// WatchHolder returns a channel that receives a value after each change
	// of the holder of key: a grant, a release, an expiry or revocation the
	// service reports, a new owner (OwnerSetter). Values are coalesced: one
	// is pending at most, and several changes may wake the watcher once, so
	// the watcher reads the holder again after each (HolderReader). The
	// watch is in effect when WatchHolder returns: a change after that is
	// never missed, unless the channel is closed.
	//
	// The channel is closed when ctx ends, when the backend is closed, or
	// when the watch fails; the caller then reads and watches again. A
	// change the service does not announce (a lease that lapses silently,
	// as on Redis) may go unreported: the caller reads again at the
	// holder's Expires. An error matching errors.ErrUnsupported means the
	// backend cannot watch now; the caller polls.
	WatchHolder(ctx context.Context, key string) (<-chan struct{}, error)
}

// OwnerSetter is implemented by leases whose stored owner (AcquireOptions.Owner,
// what Lister and HolderReader report) can be changed while they are held.
type OwnerSetter interface {
	// SetOwner replaces the owner stored with the grant. It is
	// owner-checked: if the grant is gone it changes nothing and returns
	// an error matching ErrLockLost. The owner has passed CheckOwner.
	SetOwner(ctx context.Context, owner string) error
}

// MaxOwnerLen is the longest owner description, in bytes, that a grant
// stores (AcquireOptions.Owner, OwnerSetter).
const MaxOwnerLen = 4096

// CheckOwner refuses an owner description that is not valid UTF-8 or is
// longer than MaxOwnerLen, with an error matching ErrInvalidOption: a
// backend stores it as text, and a listing shows it.
func CheckOwner(owner string) error {
	switch {
	case len(owner) > MaxOwnerLen:
		return fmt.Errorf("%w: owner of %d bytes is longer than %d", ErrInvalidOption, len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return fmt.Errorf("%w: owner is not valid UTF-8", ErrInvalidOption)
	}
	return nil
}
