package election_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
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

// falseLossEnv, when set, makes TestConformanceRefusesFalseLoss the child
// that runs the suite over a backend that reports false losses.
const falseLossEnv = "ELECTION_TEST_FALSE_LOSS"

// The election suite fails a backend whose SetOwner reports a live term
// lost (as pglock's did through a session pooler): Proclaim's report of a
// loss is judged on the term's state before the call, since the call's
// report ends the term. The suite runs in a child process, whose failure
// is the result.
func TestConformanceRefusesFalseLoss(t *testing.T) {
	if os.Getenv(falseLossEnv) != "" {
		srv := memlock.New()
		distlocktest.RunElection(t, func(t *testing.T) driver.Backend { return falseLoss{srv} },
			distlocktest.WithTTL(300*time.Millisecond))
		return
	}
	child := exec.Command(os.Args[0], "-test.run=^TestConformanceRefusesFalseLoss$/^Candidates$", "-test.count=1")
	child.Env = append(os.Environ(), falseLossEnv+"=1")
	out, err := child.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the suite over a backend that reports false losses: %v, want a failure; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "Proclaim: election: proclaim") {
		t.Errorf("the suite failed, but not on Proclaim's false loss:\n%s", out)
	}
}

// falseLoss is memlock with a SetOwner that reports every grant lost,
// touching nothing. It is not a driver.BatchRefresher: memlock's takes its
// own leases only.
type falseLoss struct{ srv *memlock.Backend }

func (b falseLoss) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := b.srv.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return falseLossLease{l}, nil
}

func (b falseLoss) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	return b.srv.Holder(ctx, key)
}

func (b falseLoss) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.srv.WatchHolder(ctx, key)
}

func (b falseLoss) Close() error { return nil } // srv is shared by the run

type falseLossLease struct{ driver.Lease }

func (falseLossLease) SetOwner(context.Context, string) error {
	return fmt.Errorf("%w: not found", distlock.ErrLockLost)
}
