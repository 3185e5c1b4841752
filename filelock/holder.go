//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.HolderReader  = (*Backend)(nil)
	_ driver.HolderWatcher = (*Backend)(nil)
	_ driver.OwnerSetter   = (*lease)(nil)
)

// Holder implements driver.HolderReader: whether the lock file of key is
// locked now, exclusively (shared grants are Readers'), and by whom, read as List reads it (with the same brief
// shared flock). A grant is reported once it is complete, its holder
// description written with its token: a grant in progress (its flock
// taken, its token or description not yet written), a release in
// progress (its description removed, its flock not yet dropped) and a
// grant whose description could not be written read as free. Only a
// reader that comes between the death of a holder and the next holder's
// first step (removing the dead one's description) reads the dead holder.
func (b *Backend) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Holder{}, false, err
	}
	h, state, described, err := b.probe(fileName(key))
	switch {
	case err != nil:
		return driver.Holder{}, false, fileErr("probe lock file", err)
	case state != probeHeld || !described || h.Key != key:
		return driver.Holder{}, false, nil
	}
	return h, true, nil
}

// WatchHolder implements driver.HolderWatcher with inotify, on Linux: a
// watch of the lock directory, for the key's lock file and holder
// description. Elsewhere, or when inotify's limits are reached, it
// returns an error matching errors.ErrUnsupported, and the watcher polls.
// The watch ends when ctx ends or the Backend is closed.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if b.closing.Err() != nil {
		return nil, ErrClosed
	}
	name := fileName(key)
	sub := b.w.subscribeDir(b.dir, name+lockSuffix, name+infoSuffix)
	if sub == nil {
		return nil, fmt.Errorf("filelock: cannot watch %s: %w", b.dir, errors.ErrUnsupported)
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.closing, cancel)
	context.AfterFunc(wctx, func() {
		stop()
		sub.close() // no wake-up after this: C can be closed
		close(sub.C)
	})
	return sub.C, nil
}

// SetOwner implements driver.OwnerSetter: it replaces the holder
// description, while the lease still holds the key's lock file.
func (l *lease) SetOwner(ctx context.Context, owner string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, l.token, l.key)
	}
	if _, err := l.checkLocked(); err != nil {
		if errors.Is(err, driver.ErrLockLost) {
			l.dropLocked()
		}
		return err
	}
	in := info{Key: l.key, Token: infoToken(l.token), Owner: owner, PID: os.Getpid(), Host: l.b.host, Since: l.since}
	if err := l.b.writeInfo(l.name, in); err != nil {
		return fileErr("write holder description", err)
	}
	return nil
}
