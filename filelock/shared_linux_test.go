//go:build linux

package filelock_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

// A reader kept out only by a waiting writer's mark (the shared flock of
// the key's writers file) is woken when the mark is let go, though the
// key's lock file is neither opened nor closed meanwhile: a reader whose
// Backend never polls (an hour) is granted.
func TestWritersFileWakesReaders(t *testing.T) {
	dir := t.TempDir()
	const key = "k"
	writerWaitedOnce(t, dir, key)
	// A waiting writer's mark, as one of another process holds it: the
	// writers file open for writing, with a shared flock.
	m, err := os.OpenFile(filepath.Join(dir, key+".writers"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := syscall.Flock(int(m.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	slow := newBackend(t, dir, filelock.WithPollInterval(time.Hour))
	rgot := waitFor(func() (driver.Lease, error) {
		return slow.AcquireShared(ctxFor(t), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	// The reader waits once it watches both files.
	deadline := time.Now().Add(time.Minute)
	for filelock.Subscriptions(slow) < 2 {
		select {
		case g := <-rgot:
			t.Fatalf("a reader granted while a writer's mark is held: %v, %v", g.l, g.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader does not wait a minute after it asked")
		}
		time.Sleep(time.Millisecond)
	}
	m.Close() // the writer stops waiting
	release(t, recv(t, rgot, "a reader behind a writer's mark, let go"))
}
