// Package supervisor is the supervisor process of `distlock run`: the
// process between distlock and the command, which keeps the lock's
// deadline and kills the command's group when distlock dies (see Main), and
// the messages distlock and it exchange.
//
// On Linux it imports the standard library's core and package standby
// alone, so that the distlock command runs Main from an early init
// (package early), before the lock services' clients initialise: a
// supervisor then starts in about the time of a Go program that links
// little, rather than of all of distlock. Keep it so: Go initialises a
// package only once no package that sorts before it is ready, so an
// import of one that sorts after early (golang.org/x/sys/unix, os/exec)
// can let heavy packages initialise first (the CLI's
// TestSupervisorRunsBeforeHeavyInits checks that none does).
package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
)

// The exit codes the supervisor reports, the CLI's (its ExitSoftware and
// so on; a test checks that they agree).
const (
	ExitUsage      = 64
	ExitSoftware   = 70
	ExitLockLost   = 76
	ExitCannotExec = 126
	ExitNotFound   = 127
)

// ExecError returns the exit code and the message for err, the failure
// to start the command name.
func ExecError(name string, err error) (int, error) {
	if errors.Is(err, fs.ErrNotExist) {
		return ExitNotFound, fmt.Errorf("command not found: %w", err)
	}
	return ExitCannotExec, fmt.Errorf("cannot run %q: %w", name, err)
}
