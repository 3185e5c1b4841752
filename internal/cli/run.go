package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
)

// Defaults of the run command's flags.
const (
	DefaultGrace = 10 * time.Second
	// releaseTimeout bounds the release of the lock after the command ends.
	releaseTimeout = 30 * time.Second
)

type runFlags struct {
	timeout time.Duration
	noWait  bool
	ttl     time.Duration
	grace   time.Duration
}

func (r *runner) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] KEY -- COMMAND [ARG...]",
		Short: "Run a command while holding the lock on KEY",
		Long: `Run waits for the lock on KEY (or, with --no-wait, tries once), then runs
COMMAND with DISTLOCK_KEY and DISTLOCK_TOKEN (the fencing token) in its
environment, renews the lock while it runs, and releases it when it ends.

If the lock is lost, the command gets SIGTERM, then SIGKILL after --grace,
and distlock exits 76. SIGINT, SIGTERM and SIGHUP sent to distlock are
forwarded to the command. On Linux the command is killed if distlock itself
dies, so that it never runs without the lock (this reaches the command, not
processes it left running in the background).

distlock exits with the command's status (128+n if it was killed by signal
n); 75 when the lock was not acquired (held, with --no-wait, or --timeout
passed); 64 on usage errors; 69 when the lock service failed.`,
		Example: `  distlock run jobs/nightly -- ./nightly.sh
  distlock run --no-wait --backend file:///var/lib/myapp/locks jobs/nightly -- sh -c 'echo $DISTLOCK_TOKEN'`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case dash < 0 && len(args) == 0:
				return usagef("missing KEY and -- COMMAND")
			case dash < 0:
				return usagef(`missing "--" between KEY and the command: distlock run [flags] KEY -- COMMAND [ARG...]`)
			case dash == 0:
				return usagef("missing KEY before --")
			case dash > 1:
				return usagef("want one KEY before --, got %d: %q", dash, args[:dash])
			case len(args) == dash:
				return usagef("missing the command after --")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitWith(r.run(cmd.Context(), args[0], args[1:], f))
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.timeout, "timeout", 0, "give up waiting for the lock after this long, exit 75 (0: wait forever)")
	fl.BoolVar(&f.noWait, "no-wait", false, "try once; if the lock is held, exit 75 at once")
	fl.DurationVar(&f.ttl, "ttl", distlock.DefaultTTL, "lease TTL asked of the lock service; the lock is renewed every TTL/3")
	fl.DurationVar(&f.grace, "grace", DefaultGrace, "after the lock is lost, time between SIGTERM and SIGKILL to the command")
	return cmd
}

func (r *runner) run(ctx context.Context, key string, argv []string, f runFlags) error {
	if err := distlock.ValidateKey(key); err != nil {
		return err
	}
	switch {
	case f.timeout < 0:
		return usagef("--timeout %v is negative", f.timeout)
	case f.ttl <= 0 || f.ttl > distlock.MaxTTL:
		return usagef("--ttl %v is not in (0, %v]", f.ttl, distlock.MaxTTL)
	case f.grace < 0:
		return usagef("--grace %v is negative", f.grace)
	case f.noWait && f.timeout > 0:
		return usagef("--no-wait and --timeout exclude each other")
	}
	b, closer, err := openBackend(ctx, r.backendURL, r.openers)
	if err != nil {
		return err
	}
	defer closer.Close()
	c, err := distlock.New(b, distlock.WithTTL(f.ttl), distlock.WithLogger(r.log))
	if err != nil {
		return fmt.Errorf("--ttl %v: %w", f.ttl, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		c.Close(cctx)
	}()

	// From here on these signals do not kill distlock: they interrupt the
	// wait, or are forwarded to the command.
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	lock, err := r.acquire(ctx, c, b, key, f, sigc)
	if err != nil {
		return err
	}
	r.log.Debug("lock acquired", "key", key, "token", lock.Token(), "backend", redact(r.backendOrDefault()))
	return r.supervise(ctx, lock, argv, f, sigc)
}

func (r *runner) backendOrDefault() string {
	if r.backendURL == "" {
		return "file://"
	}
	return r.backendURL
}

// acquire waits for the lock, until the timeout or a signal.
func (r *runner) acquire(ctx context.Context, c *distlock.Client, b distlock.Backend, key string, f runFlags, sigc <-chan os.Signal) (*distlock.Lock, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if f.timeout > 0 {
		wctx, cancel = context.WithTimeout(wctx, f.timeout)
		defer cancel()
	}
	var sig os.Signal
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case sig = <-sigc:
			cancel()
		case <-stop:
		}
	}()
	r.log.Debug("acquiring", "key", key, "wait", !f.noWait, "timeout", f.timeout, "backend", redact(r.backendOrDefault()))
	lock, err := c.Acquire(wctx, key, distlock.WithWait(!f.noWait))
	close(stop)
	<-stopped
	switch {
	case sig != nil:
		if lock != nil {
			lock.Release(context.WithoutCancel(ctx))
		}
		return nil, &exitError{ExitSignal + signum(sig), fmt.Errorf("interrupted by %v while waiting for the lock on %q", sig, key)}
	case err == nil:
		return lock, nil
	case f.timeout > 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, &exitError{ExitNotAcquired, fmt.Errorf("timed out after %v waiting for the lock on %q%s", f.timeout, key, r.heldBy(ctx, b, key))}
	case f.noWait && errors.Is(err, distlock.ErrNotAcquired) && ctx.Err() == nil:
		return nil, &exitError{ExitNotAcquired, fmt.Errorf("the lock on %q is held%s (--no-wait)", key, r.heldBy(ctx, b, key))}
	}
	return nil, err
}

// heldBy describes the holder of key, when the backend can tell.
func (r *runner) heldBy(ctx context.Context, b distlock.Backend, key string) string {
	l, ok := b.(distlock.Lister)
	if !ok {
		return ""
	}
	hs, err := l.List(ctx, key)
	if err != nil {
		return ""
	}
	for _, h := range hs {
		if h.Key == key {
			if h.Owner != "" {
				return fmt.Sprintf(" by %s (token %d)", h.Owner, h.Token)
			}
			return fmt.Sprintf(" (token %d)", h.Token)
		}
	}
	return ""
}

// supervise runs the command while the lock is held and releases the lock
// on every path.
func (r *runner) supervise(ctx context.Context, lock *distlock.Lock, argv []string, f runFlags, sigc <-chan os.Signal) error {
	key := lock.Key()
	released := false
	release := func() error {
		released = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		return lock.Release(rctx)
	}
	defer func() {
		if !released {
			release()
		}
	}()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.stdin, r.stdout, r.stderr
	cmd.Env = append(os.Environ(), "DISTLOCK_KEY="+key, "DISTLOCK_TOKEN="+strconv.FormatUint(lock.Token(), 10))
	cmd.SysProcAttr = childAttr()
	cmd.WaitDelay = time.Second // for pipes that the command's background processes keep open
	ch, err := startChild(cmd)
	if err != nil {
		return execError(argv[0], err)
	}
	r.log.Debug("command started", "pid", cmd.Process.Pid, "key", key, "token", lock.Token())

	var (
		lost     = lock.Done()
		stopping = ctx.Done()
		killer   *time.Timer
		killC    <-chan time.Time
		lostErr  error
	)
	terminate := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if killer == nil {
			killer = time.NewTimer(f.grace)
			killC = killer.C
		}
	}
loop:
	for {
		select {
		case <-ch.done:
			break loop
		case s := <-sigc:
			r.log.Debug("forwarding signal", "signal", s, "pid", cmd.Process.Pid)
			cmd.Process.Signal(s)
		case <-lost:
			lost = nil
			lostErr = lock.Err()
			fmt.Fprintf(r.stderr, "distlock: lost the lock on %q: %v; terminating the command (SIGTERM, then SIGKILL after %v)\n",
				key, lostErr, f.grace)
			terminate()
		case <-stopping:
			stopping = nil
			r.log.Debug("stopping: terminating the command", "pid", cmd.Process.Pid)
			terminate()
		case <-killC:
			killC = nil
			r.log.Debug("grace period over: killing the command", "pid", cmd.Process.Pid)
			cmd.Process.Kill()
		}
	}
	if killer != nil {
		killer.Stop()
	}
	status, how := exitStatus(cmd.ProcessState)
	r.log.Debug("command ended", "pid", cmd.Process.Pid, "status", status, "how", how)
	if lostErr == nil {
		lostErr = lock.Err() // lost just as the command ended
	}
	if lostErr != nil {
		release()
		return &exitError{ExitLockLost, fmt.Errorf("the lock on %q was lost while the command ran (%v); the command %s", key, lostErr, how)}
	}
	if err := release(); err != nil {
		if errors.Is(err, distlock.ErrLockLost) {
			return &exitError{ExitLockLost, fmt.Errorf("the lock on %q had been lost when the command ended (%v); the command %s", key, err, how)}
		}
		fmt.Fprintf(r.stderr, "distlock: warning: releasing the lock on %q: %v\n", key, err)
	}
	return &exitError{status, nil}
}

// exitStatus maps a finished command to distlock's exit code, and says
// how it ended.
func exitStatus(ps *os.ProcessState) (int, string) {
	if ps == nil {
		return ExitSoftware, "ended in an unknown way"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitSignal + int(ws.Signal()), fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return ps.ExitCode(), fmt.Sprintf("exited with status %d", ps.ExitCode())
}

func execError(name string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, exec.ErrDot), errors.Is(err, fs.ErrNotExist):
		return &exitError{ExitNotFound, fmt.Errorf("command not found: %w", err)}
	default:
		return &exitError{ExitCannotExec, fmt.Errorf("cannot run %q: %w", name, err)}
	}
}

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}

// child is a started command, waited for by the goroutine that started it.
type child struct {
	done chan struct{} // closed when the command has exited and been waited for
}

// startChild starts cmd from a goroutine locked to its OS thread, which
// stays alive, waiting for the command, until the command exits: the
// parent-death signal set by childAttr fires when the thread that forked
// the child exits, not only when the process does.
func startChild(cmd *exec.Cmd) (*child, error) {
	ch := &child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		lockThread()
		defer unlockThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(ch.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ch, nil
}
