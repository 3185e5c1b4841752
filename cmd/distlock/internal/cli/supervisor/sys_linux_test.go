package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
)

// lateSignalsEnv makes TestLateParentDeathSignals's process the one that
// watches.
const lateSignalsEnv = "DISTLOCK_TEST_LATE_PARENT_DEATH_SIGNALS"

// A parent-death signal that comes after the one that showed the parent
// gone does not end the supervisor: the death of a distlock of many
// threads sends one per thread that was the supervisor's parent, and a
// supervisor that died of a late one left its command running, unlocked,
// with the lock file closed (a partition member SIGKILLed while its units
// ran). The test runs in a process of its own, which watches a parent it
// does not have (so the first signal shows it gone), then sends itself
// more of them, and last SIGWINCH, which it waits for through the signal
// package. A SIGTERM left to its default action ends the process in the
// runtime's signal handler, well before SIGWINCH has been relayed to a
// channel (a thread may take one while another takes the other, so this
// is a race won by a wide margin, not an order guaranteed: the test
// failed 20 runs of 20 on the code before the fix).
func TestLateParentDeathSignals(t *testing.T) {
	if os.Getenv(lateSignalsEnv) == "1" {
		gone := watchParent(-1)
		self := os.Getpid()
		syscall.Kill(self, standby.ParentDeathSignal)
		<-gone
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		for range 10 {
			syscall.Kill(self, standby.ParentDeathSignal)
		}
		syscall.Kill(self, syscall.SIGWINCH)
		<-winch
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLateParentDeathSignals$", "-test.count=1")
	cmd.Env = append(os.Environ(), lateSignalsEnv+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("the watching process died of %v, a parent-death signal that came after its parent was seen gone; output:\n%s", ws.Signal(), out)
		}
	}
	if err != nil {
		t.Fatalf("the watching process: %v; output:\n%s", err, out)
	}
}
