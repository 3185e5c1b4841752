package cli

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redislock"
)

// Exit codes of the distlock command. This table is the one place they are
// defined; the package documentation repeats it for users.
//
//	0       success (run, elect: the command exited 0)
//	1       leader: the election has no leader
//	1-125   run, elect: the command's own exit status
//	64      usage: bad flags or arguments, an invalid key or --ttl, an
//	        unknown, reserved or malformed backend URL, a backend that
//	        cannot list holders, a backend or command that this operating
//	        system does not support
//	69      the lock service failed or could not be reached, or is set
//	        up unsafely (a Redis that may evict keys)
//	70      internal error; run: the supervisor of the command could not
//	        start, or died (its process group was then killed)
//	75      the lock was not acquired: held (--no-wait) or --timeout
//	        passed; --held-exit chooses another code
//	76      run: the lock was lost while the command ran, or its deadline
//	        neared without a confirmed renewal; elect: the same of the
//	        term; the command was terminated (SIGTERM, then SIGKILL)
//	126     run, elect: the command could not be executed
//	127     run, elect: the command was not found
//	128+n   run, elect: the command was killed by signal n, or distlock was
//	        interrupted by signal n while waiting for the lock (or the
//	        election). For SIGHUP,
//	        SIGINT, SIGQUIT and SIGTERM the distlock command (Main), on
//	        Linux, then kills itself with that same signal once the lock is
//	        released, so that its caller sees a death by signal (a shell
//	        loop stops on Ctrl-C) and a shell reports 128+n as usual. It
//	        exits 128+n instead where it cannot, or when the signal was
//	        ignored when distlock started.
//
// A command may itself exit with 64-76; distlock then reports its own
// failures on standard error, which tells them apart.
const (
	ExitOK          = 0
	ExitNoLeader    = 1
	ExitUsage       = 64
	ExitUnavailable = 69
	ExitSoftware    = 70
	ExitNotAcquired = 75
	ExitLockLost    = 76
	ExitCannotExec  = 126
	ExitNotFound    = 127
	ExitSignal      = 128
)

// exitError carries an exit code chosen by a command. A nil err exits
// quietly (the child's own status). A non-zero sig asks Main to die of that
// signal rather than exit with code.
type exitError struct {
	code int
	err  error
	sig  syscall.Signal
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError marks a problem with how distlock was invoked.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitWith gives err a code: the one place where errors become exit codes.
// Errors that reach Run without one come from the command line parser and
// are usage errors.
func exitWith(err error) error {
	var ee *exitError
	var ue *usageError
	var ev *redislock.EvictionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case errors.As(err, &ev):
		// A setting of the server, not of distlock's invocation; said in
		// the terms of the command line.
		return &exitError{code: ExitUnavailable, err: fmt.Errorf("the Redis server %s has maxmemory-policy %q, which may evict lock keys and token counters, breaking mutual exclusion and fencing tokens: set maxmemory-policy noeviction on the server, or accept the risk with ?eviction_allowed=true in the backend URL",
			ev.Addr, ev.Policy)}
	case errors.As(err, &ue), errors.Is(err, distlock.ErrInvalidKey), errors.Is(err, distlock.ErrInvalidOption):
		return &exitError{code: ExitUsage, err: &usageError{err}}
	case errors.Is(err, distlock.ErrNotAcquired):
		return &exitError{code: ExitNotAcquired, err: err}
	case errors.Is(err, distlock.ErrLockLost):
		return &exitError{code: ExitLockLost, err: err}
	case errors.Is(err, distlock.ErrUnavailable):
		return &exitError{code: ExitUnavailable, err: err}
	case errors.Is(err, errInternal):
		return &exitError{code: ExitSoftware, err: err}
	}
	// Any other failure came from the lock service (or its files).
	return &exitError{code: ExitUnavailable, err: err}
}

var errInternal = errors.New("internal error")

// codeOf returns the exit code and the message to print for the error a
// command returned (no message for a quiet exit), and the signal to die of
// instead of exiting, if any.
func codeOf(err error) (code int, msg string, usage bool, sig syscall.Signal) {
	if err == nil {
		return ExitOK, "", false, 0
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		return ExitUsage, err.Error(), true, 0
	}
	var ue *usageError
	usage = errors.As(ee.err, &ue)
	if ee.err == nil {
		return ee.code, "", false, ee.sig
	}
	return ee.code, ee.err.Error(), usage, ee.sig
}
