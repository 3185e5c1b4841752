//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

// Holder reads exactly one key: its grant's token and owner while its lock
// file is locked, nothing for a key it is a prefix of, nothing after the
// release; SetOwner changes the owner of a held grant only.
func TestHolder(t *testing.T) {
	ctx := ctxFor(t)
	dir := t.TempDir()
	b, reader := newBackend(t, dir), newBackend(t, dir)
	other, err := b.Acquire(ctx, "svc/leader2", driver.AcquireOptions{TTL: time.Minute, Owner: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, other)
	if h, held, err := reader.Holder(ctx, "svc/leader"); held || err != nil {
		t.Errorf(`Holder("svc/leader") = %+v, %v, %v while only "svc/leader2" is held`, h, held, err)
	}
	l, err := b.Acquire(ctx, "svc/leader", driver.AcquireOptions{TTL: time.Minute, Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what, owner string) {
		t.Helper()
		h, held, err := reader.Holder(ctx, "svc/leader")
		if !held || err != nil || h.Key != "svc/leader" || h.Token != l.Token() || h.Owner != owner {
			t.Errorf("%s: Holder() = %+v, %v, %v; want token %d, owner %q", what, h, held, err, l.Token(), owner)
		}
	}
	check("held", "a")
	if err := l.(driver.OwnerSetter).SetOwner(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	check("after SetOwner", "b")
	release(t, l)
	if h, held, err := reader.Holder(ctx, "svc/leader"); held || err != nil {
		t.Errorf("Holder() after Release = %+v, %v, %v", h, held, err)
	}
	if err := l.(driver.OwnerSetter).SetOwner(ctx, "c"); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("SetOwner after Release: %v, want ErrLockLost", err)
	}
}

// WatchHolder wakes its watcher, in another Backend, at a grant, a new
// owner and a release; it ends with its context and with the Backend.
func TestWatchHolder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no inotify: the watch is unsupported and watchers poll")
	}
	ctx := ctxFor(t)
	dir := t.TempDir()
	b, watcher := newBackend(t, dir), newBackend(t, dir)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := watcher.WatchHolder(wctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	woken := func(what string) {
		t.Helper()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no wake-up", what)
		}
	}
	drain := func() {
		for {
			select {
			case <-ch:
			default:
				return
			}
		}
	}
	l := acquire(t, b, "k")
	woken("grant")
	drain()
	if err := l.(driver.OwnerSetter).SetOwner(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	woken("SetOwner")
	drain()
	release(t, l)
	woken("release")
	stop()
	for range ch { // closed when its context ends
	}

	ch, err = watcher.WatchHolder(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	watcher.Close()
	for range ch { // closed when the Backend is
	}
	if _, err := watcher.WatchHolder(ctx, "k"); !errors.Is(err, filelock.ErrClosed) {
		t.Errorf("WatchHolder after Close: %v, want ErrClosed", err)
	}
}

// A holder killed with SIGKILL wakes a watcher of its key at once: the
// kernel closes its lock file. Holder then reports the key free, though
// the dead holder's description stays on disk.
func TestWatchHolderSeesDeath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no inotify: the watch is unsupported and watchers poll")
	}
	ctx := ctxFor(t)
	dir := t.TempDir()
	b := newBackend(t, dir)
	h := startHolder(t, dir, "jobs/nightly")
	if got, held, err := b.Holder(ctx, "jobs/nightly"); !held || err != nil || got.Token != h.token || got.Owner != "helper" {
		t.Fatalf("Holder() = %+v, %v, %v; want the helper's token %d", got, held, err, h.token)
	}
	ch, err := b.WatchHolder(ctx, "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	h.kill(t)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the holder's death")
	}
	if got, held, err := b.Holder(ctx, "jobs/nightly"); held || err != nil {
		t.Errorf("Holder() after the holder's death = %+v, %v, %v", got, held, err)
	}
}

// A grant in progress (its flock taken, its token and description not yet
// written) is not reported with the token of the grant before it: a
// reader would see an ended term come back. Nor is a release in progress
// (its description removed, its flock not yet dropped) reported with no
// owner. Both read as free until the grant is complete.
func TestHolderInTransition(t *testing.T) {
	ctx := ctxFor(t)
	dir := t.TempDir()
	b := newBackend(t, dir)
	l := acquire(t, b, "k")
	first := l.Token()

	// A release in progress: the description is gone, the flock held.
	if err := os.Remove(filepath.Join(dir, "k.info")); err != nil {
		t.Fatal(err)
	}
	if h, held, err := b.Holder(ctx, "k"); held || err != nil {
		t.Errorf("Holder() during a release = %+v, %v, %v; want free", h, held, err)
	}
	release(t, l)

	// A grant in progress: the next holder has taken the flock and written
	// nothing yet.
	f, err := os.OpenFile(b.KeyPath("k"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if h, held, err := b.Holder(ctx, "k"); held || err != nil {
		t.Errorf("Holder() during the next grant = %+v, %v, %v; want free, not token %d again", h, held, err, first)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
