package election_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The election suite over memlock: every candidate a view of one service,
// whose grants lapse by their TTL (and can be revoked).
func TestConformanceMemlock(t *testing.T) {
	srv := memlock.New()
	distlocktest.RunElection(t, func(t *testing.T) driver.Backend { return srv },
		distlocktest.WithTTL(300*time.Millisecond))
}

// The election suite over filelock: every candidate a Backend of its own
// on one directory. Its grants never lapse (a flock lasts while its
// process does), so no term is abandoned.
func TestConformanceFilelock(t *testing.T) {
	dir := t.TempDir()
	distlocktest.RunElection(t, func(t *testing.T) driver.Backend {
		b, err := filelock.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}, distlocktest.WithTTL(time.Second))
}

// RunHolder, the tests of the holder of one key that elections rely on,
// over the two backends of this module that implement it: memlock, one
// service for all, and filelock, a Backend per process on one directory.
func TestHolderMemlock(t *testing.T) {
	srv := memlock.New()
	distlocktest.RunHolder(t, func(t *testing.T) driver.Backend { return srv },
		distlocktest.WithTTL(300*time.Millisecond))
}

func TestHolderFilelock(t *testing.T) {
	dir := t.TempDir()
	distlocktest.RunHolder(t, func(t *testing.T) driver.Backend {
		b, err := filelock.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}, distlocktest.WithTTL(time.Second))
}
