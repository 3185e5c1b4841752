//go:build !unix

package cli

import (
	"context"
	"os"
	"runtime"
	"syscall"

	"github.com/distlock/distlock/driver"
)

var waitSignals = []os.Signal{os.Interrupt}

// runSupported refuses `distlock run`: it needs process groups and the
// signals of Unix systems.
func runSupported() error {
	return usagef("distlock run is not supported on %s", runtime.GOOS)
}

func (r *runner) supervise(context.Context, held, driver.Backend, []string, runFlags, chan os.Signal) error {
	return runSupported()
}

func dyingSignal(os.Signal) syscall.Signal { return 0 }

func dieOf(syscall.Signal) {}

func relayedSignals() []os.Signal { return nil }
