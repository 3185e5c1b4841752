package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/cli/supervisor"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/semaphore"
)

// Defaults of the run command's flags.
const (
	DefaultGrace = 10 * time.Second
	// releaseTimeout bounds the release of the lock after the command ends.
	releaseTimeout = 30 * time.Second
)

type runFlags struct {
	timeout  time.Duration
	noWait   bool
	ttl      time.Duration
	grace    time.Duration
	heldExit int  // exit code when the lock is not acquired
	quiet    bool // say nothing when the lock is not acquired
	permits  int  // --permits: a permit of a semaphore with this limit, not the lock
	slots    bool // --slots: the permit names its slot
	shared   bool // --shared: a shared (read) lock of KEY
	// unit: the command of one of partition's units, one of several at
	// once: supervise leaves signals (partition relays them), the
	// terminal and the DISTLOCK_BACKEND warning to the caller.
	unit bool
}

// grant names what run holds: the lock on KEY, with --shared a shared
// lock of KEY (the read lock of package rwlock's read/write lock KEY), or
// with --permits a permit of the semaphore KEY, kept at
// semaphore.KeyPrefix+KEY as package semaphore keeps it, so that Go
// programs share it.
type grant struct {
	name   string // KEY as given
	key    string // the key acquired
	opts   []distlock.LockOption
	sem    *distlock.Semaphore // nil for a lock
	shared bool                // a shared lock
}

func newGrant(key string, f runFlags) (grant, error) {
	if f.shared {
		return grant{name: key, key: key, opts: []distlock.LockOption{distlock.WithShared(true)}, shared: true}, distlock.ValidateKey(key)
	}
	if f.permits == 0 {
		return grant{name: key, key: key}, distlock.ValidateKey(key)
	}
	g := grant{name: key, key: semaphore.KeyPrefix + key, sem: &distlock.Semaphore{Limit: f.permits, Slots: f.slots}}
	if err := distlock.ValidateKey(g.key); err != nil {
		return grant{}, fmt.Errorf("semaphore %q: %w", key, err)
	}
	g.opts = []distlock.LockOption{distlock.WithSemaphore(*g.sem)}
	return g, nil
}

// what names the grant in messages.
func (g grant) what() string {
	if g.shared {
		return fmt.Sprintf("a shared lock on %q", g.name)
	}
	if g.sem == nil {
		return fmt.Sprintf("the lock on %q", g.name)
	}
	return fmt.Sprintf("a permit of semaphore %q", g.name)
}

func (r *runner) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] KEY -- COMMAND [ARG...]",
		Short: "Run a command while holding the lock on KEY",
		Long: `Run waits for the lock on KEY (or, with --no-wait, tries once), then runs
COMMAND with DISTLOCK_KEY and DISTLOCK_TOKEN (the fencing token) in its
environment, renews the lock while it runs, and releases it when it ends.
--timeout bounds the wait, and the opening of the lock service (given 1s at
least); one try is always made. The default lock service is
file://` + defaultDirHelp() + `. The command gets $DISTLOCK_BACKEND naming
the lock service used (from --backend or $DISTLOCK_BACKEND) with its
password removed; a URL that cannot be cleaned with certainty is not
passed, and distlock says so.

With --permits N, run holds one of N permits of the semaphore KEY instead
of the lock: at most N commands run at once under KEY, waiting in line for
a permit as for the lock (kept at semaphore/KEY, shared with package
semaphore's semaphore of the same name). DISTLOCK_KEY is then
semaphore/KEY, DISTLOCK_TOKEN the permit's token (greater than every
earlier grant's on KEY), and with --slots DISTLOCK_SLOT the permit's slot
in [0, N), the lowest free, that no other running command has. Every
holder must name the same N: a permit asked with another N while the
semaphore is held or awaited fails with status 64, as does a service
that grants no permits: redlock:// (a quorum of independent servers could
grant more than N) and distlock+http:// (a gateway session holds one
permit of a semaphore).

With --shared, run holds a shared (read) lock of KEY, as flock -s does:
commands run with --shared share KEY and run at once, while a run
without it (an exclusive lock: the writer) waits until none of them
holds KEY, and they wait for it. Askers are served in arrival order, and
a writer waiting for KEY blocks the shared runs that come after it, so
that readers never starve it; with --no-wait a shared run fails while a
writer holds or waits for KEY. A shared lock is the read lock of package
rwlock's read/write lock KEY, and a lock in every other way: its own
DISTLOCK_TOKEN (greater than every earlier grant's on KEY), renewal,
loss and release. --shared with --permits is a usage error (64), as is
a service that grants no shared locks: redlock:// (its servers queue
askers each in its own order, so a waiting writer could not hold back
the readers after it), and any other whose backend does not.

The command runs in a process group of its own, the job, which gets the
terminal when distlock leads the terminal's foreground job: Ctrl-C and
Ctrl-Z reach it once. When the command exits, whatever is left of its
group is killed (SIGKILL) before the lock is released. If the lock is lost,
the group gets SIGTERM, then SIGKILL after --grace, and distlock exits 76.
A supervisor process between distlock and the command keeps the lock's
deadline too, as the Client keeps it from the lease the service confirmed:
--ttl on most backends, 5/12 of the session timeout on zk://, the time left that
the gateway reports on distlock+http://; no deadline on file:// (the lock
file, which the supervisor holds too) and postgres:// session locks
(distlock's connection). If the deadline nears without a confirmed renewal
(distlock stopped or starved), the supervisor sends the group SIGTERM
--grace before it (at most the lock's at-risk window before it: the Client
renews at least two windows before the deadline) and SIGKILL at it, so
that the job is gone before the lease can lapse. Signals sent to
distlock (all but SIGKILL, SIGSTOP, SIGCHLD, SIGPIPE, SIGURG, SIGTTIN and
SIGTTOU) are forwarded to the group; ignored ones (nohup) stay ignored. The supervisor kills the
group if distlock itself dies (at once on Linux) and, with file://, keeps
the lock until the group is gone. Not covered: processes that leave the
group (setsid), that run as another user than distlock, and distlock and
its supervisor killed or paused together.

distlock exits with the command's status (dying of the same signal if the
command died of SIGHUP, SIGINT, SIGQUIT or SIGTERM, else 128+n for signal
n); 75 when the lock was not acquired (held, with --no-wait, or --timeout
passed; --held-exit changes it, --quiet silences it); 64 on usage errors;
69 when the lock service failed; 70 when the supervisor failed; 76 when
the lock was lost or its deadline neared while the command ran.`,
		Example: `  distlock run jobs/nightly -- ./nightly.sh
  distlock run --no-wait --backend file:///var/lib/myapp/locks jobs/nightly -- sh -c 'echo $DISTLOCK_TOKEN'

  # readers run together; a writer waits for them, and they for it
  distlock run --shared data/catalog -- ./read-catalog.sh
  distlock run data/catalog -- ./rebuild-catalog.sh

  # at most 3 backups at once, each told its slot (0, 1 or 2)
  distlock run --permits 3 --slots backups -- sh -c 'backup --target disk$DISTLOCK_SLOT'

  # crontab: skip a run while the previous one still holds the lock, silently
  */5 * * * * distlock run --no-wait --quiet --held-exit 0 jobs/sync -- /usr/local/bin/sync`,
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
			if cmd.Flags().Changed("permits") && f.permits == 0 {
				return exitWith(usagef("--permits 0 is not in [1, %d]", driver.MaxPermits))
			}
			return exitWith(r.run(cmd.Context(), args[0], args[1:], f))
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.timeout, "timeout", 0, "give up waiting for the lock after this long, exit 75; one try is always made (0: wait forever)")
	fl.BoolVar(&f.noWait, "no-wait", false, "try once; if the lock is held, exit 75 at once")
	fl.IntVar(&f.heldExit, "held-exit", ExitNotAcquired, "exit status when the lock is not acquired (held with --no-wait, or --timeout passed)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "say nothing when the lock is not acquired")
	fl.DurationVar(&f.ttl, "ttl", distlock.DefaultTTL, "lease TTL asked of the lock service (zk:// takes 5/12 of its session timeout); the lock is renewed every TTL/3, or halfway to its deadline when sooner")
	fl.IntVar(&f.permits, "permits", 0, "hold one of N permits of the semaphore KEY (shared with package semaphore's of the same name and limit) instead of the lock on KEY")
	fl.BoolVar(&f.shared, "shared", false, "hold a shared (read) lock of KEY, as flock -s: shared runs of KEY run together, and a run without --shared (the writer) excludes them")
	fl.BoolVar(&f.slots, "slots", false, "with --permits, the permit names its slot in [0, N): DISTLOCK_SLOT, the lowest free")
	fl.DurationVar(&f.grace, "grace", DefaultGrace, "after the lock is lost, time between SIGTERM and SIGKILL to the command (cut to the lock's at-risk window when its deadline nears without a renewal)")
	return cmd
}

func (r *runner) run(ctx context.Context, key string, argv []string, f runFlags) error {
	switch {
	case f.permits < 0 || f.permits > driver.MaxPermits:
		return usagef("--permits %d is not in [1, %d]", f.permits, driver.MaxPermits)
	case f.shared && f.permits != 0:
		return usagef("--shared and --permits exclude each other: a permit of a semaphore is not a shared lock")
	case f.slots && f.permits == 0:
		return usagef("--slots needs --permits")
	}
	g, err := newGrant(key, f)
	if err != nil {
		return err
	}
	switch {
	case f.timeout < 0:
		return usagef("--timeout %v is negative", f.timeout)
	case f.noWait && f.timeout > 0:
		return usagef("--no-wait and --timeout exclude each other")
	case f.heldExit < 0 || f.heldExit > 255:
		return usagef("--held-exit %d is not in [0, 255]", f.heldExit)
	}
	b, c, closeClient, err := r.openSupervised(ctx, f.timeout, f.ttl, f.grace)
	if err != nil {
		return err
	}
	defer closeClient()

	// From here on the signals that would end distlock interrupt the wait
	// instead; once the command runs, they and more are forwarded to it.
	// Signals ignored when distlock started (nohup, or the background jobs
	// of a shell without job control) stay ignored, for the command too.
	sigc := make(chan os.Signal, 16)
	notify(sigc, waitSignals)
	defer signal.Stop(sigc)

	lock, err := r.acquire(ctx, c, b, g, f, sigc)
	if err != nil {
		return err
	}
	// The Client logs the grant (with --verbose): said once.
	return r.supervise(ctx, heldLock{Lock: lock, g: g}, b, argv, f, sigc)
}

// held is what a command runs under: the lock of `run` (heldLock) or the
// term of `elect` (leadership). Release gives it up, once the command's
// group is gone.
type held interface {
	Key() string
	Token() uint64
	Done() <-chan struct{}
	Err() error
	RiskWindow() (deadline time.Time, window time.Duration, ok bool)
	Release(ctx context.Context) error
	// describe names it in messages: `the lock on "k"`.
	describe() string
}

// heldLock is the lock or permit of `run`.
type heldLock struct {
	*distlock.Lock
	g grant
}

func (l heldLock) describe() string {
	if slot, ok := l.Slot(); ok {
		return fmt.Sprintf("%s (slot %d)", l.g.what(), slot)
	}
	return l.g.what()
}

// openSupervised checks --ttl and --grace as run, elect and partition
// take them, and whether commands can be run here, then opens the lock
// service (openClient).
func (r *runner) openSupervised(ctx context.Context, timeout, ttl, grace time.Duration) (b driver.Backend, c *distlock.Client, closeClient func(), err error) {
	switch {
	case ttl <= 0 || ttl > distlock.MaxTTL:
		return nil, nil, nil, usagef("--ttl %v is not in (0, %v]", ttl, distlock.MaxTTL)
	case grace < 0:
		return nil, nil, nil, usagef("--grace %v is negative", grace)
	}
	if err := runSupported(); err != nil {
		return nil, nil, nil, err
	}
	return r.openClient(ctx, timeout, ttl)
}

// openClient opens the lock service within timeout (see openWithin) and
// returns it with a Client of it whose locks have ttl; closeClient
// releases what is still held and closes both.
func (r *runner) openClient(ctx context.Context, timeout, ttl time.Duration) (b driver.Backend, c *distlock.Client, closeClient func(), err error) {
	b, closer, err := r.openWithin(ctx, timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err = distlock.New(b, distlock.WithTTL(ttl), distlock.WithLogger(r.clientLog()))
	if err != nil {
		closer.Close()
		return nil, nil, nil, fmt.Errorf("--ttl %v: %w", ttl, err)
	}
	return b, c, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		c.Close(cctx)
		closer.Close()
	}, nil
}

// minOpen is how long opening the lock service may take under a shorter
// --timeout: far longer than a service that answers takes, so that a
// tiny timeout still makes its one try.
const minOpen = time.Second

// openWithin opens the backend, bounded by timeout when it is not 0
// (--timeout), or minOpen if longer: a lock service that does not answer
// must not hold a run much longer than a held lock would. The backend's
// own bound on each server applies as well, whichever is sooner.
func (r *runner) openWithin(ctx context.Context, timeout time.Duration) (driver.Backend, io.Closer, error) {
	if timeout <= 0 {
		return openBackend(ctx, r.backendURL, r.openers)
	}
	octx, cancel := context.WithTimeout(ctx, max(timeout, minOpen))
	defer cancel()
	b, closer, err := openBackend(octx, r.backendURL, r.openers)
	if err != nil && ctx.Err() == nil && errors.Is(octx.Err(), context.DeadlineExceeded) && errors.Is(err, distlock.ErrUnavailable) {
		return nil, nil, &exitError{code: ExitUnavailable, err: fmt.Errorf("the lock service did not answer within --timeout %v: %w", max(timeout, minOpen), err)}
	}
	return b, closer, err
}

// notify relays the signals of sigs that are not ignored to c.
func notify(c chan<- os.Signal, sigs []os.Signal) {
	for _, s := range sigs {
		if !signal.Ignored(s) {
			signal.Notify(c, s)
		}
	}
}

func (r *runner) backendOrDefault() string {
	if r.backendURL == "" {
		return "file://"
	}
	return r.backendURL
}

// minTry is how long the first try of `run --timeout D` may take when D
// is shorter: a timeout bounds the wait for a held lock, and one try is
// always made, as with --no-wait.
const minTry = 5 * time.Second

// acquire waits for the lock or permit, until the timeout or a signal.
func (r *runner) acquire(ctx context.Context, c *distlock.Client, b driver.Backend, g grant, f runFlags, sigc <-chan os.Signal) (*distlock.Lock, error) {
	key := g.key
	r.log.Debug("acquiring", "key", key, "permits", f.permits, "shared", f.shared, "wait", !f.noWait, "timeout", f.timeout, "backend", describeBackend(b, r.backendURL))
	var (
		lock *distlock.Lock
		err  error
	)
	sig := untilSignal(ctx, sigc, func(sctx context.Context) {
		if f.timeout > 0 {
			lock, err = tryThenWait(sctx, c, key, f.timeout, g.opts...)
		} else {
			lock, err = c.Acquire(sctx, key, append(g.opts, distlock.WithWait(!f.noWait))...)
		}
	})
	notAcquired := func(format string, args ...any) error {
		if f.quiet {
			return &exitError{code: f.heldExit}
		}
		return &exitError{code: f.heldExit, err: fmt.Errorf(format, args...)}
	}
	switch {
	case sig != nil:
		if lock != nil {
			lock.Release(context.WithoutCancel(ctx))
		}
		return nil, &exitError{code: ExitSignal + signum(sig), err: fmt.Errorf("interrupted by %v while waiting for %s", sig, g.what()), sig: dyingSignal(sig)}
	case err == nil:
		return lock, nil
	case ctx.Err() != nil:
	case g.sem != nil && errors.Is(err, errors.ErrUnsupported):
		return nil, usagef("backend %s cannot grant permits (--permits): %v", redact(r.backendOrDefault()), err)
	case g.shared && errors.Is(err, errors.ErrUnsupported):
		return nil, usagef("backend %s cannot grant shared locks (--shared): %v", redact(r.backendOrDefault()), err)
	case f.timeout > 0 && errors.Is(err, context.DeadlineExceeded) && errors.Is(err, distlock.ErrUnavailable):
		// Not "held": the service did not answer. Said even with --quiet.
		return nil, &exitError{code: ExitUnavailable, err: fmt.Errorf("the lock service did not answer within --timeout %v: %w", f.timeout, err)}
	case f.timeout > 0 && errors.Is(err, context.DeadlineExceeded):
		return nil, notAcquired("timed out after %v waiting for %s%s", f.timeout, g.what(), r.heldBy(ctx, c, b, g))
	case f.noWait && errors.Is(err, distlock.ErrNotAcquired) && g.sem != nil:
		return nil, notAcquired("every permit of semaphore %q is held or awaited%s (--no-wait)", g.name, r.heldBy(ctx, c, b, g))
	case f.noWait && errors.Is(err, distlock.ErrNotAcquired) && g.shared:
		if by := r.heldBy(ctx, c, b, g); by != "" {
			return nil, notAcquired("the lock on %q is held%s (--no-wait)", key, by)
		}
		return nil, notAcquired("the lock on %q is held or awaited by a run without --shared (--no-wait)", key)
	case f.noWait && errors.Is(err, distlock.ErrNotAcquired):
		return nil, notAcquired("the lock on %q is held%s (--no-wait)", key, r.heldBy(ctx, c, b, g))
	}
	return nil, err
}

// untilSignal calls wait with a context that the first signal on sigc
// cancels, and returns that signal, or nil if none came before wait
// returned.
func untilSignal(ctx context.Context, sigc <-chan os.Signal, wait func(ctx context.Context)) os.Signal {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
	wait(sctx)
	close(stop)
	<-stopped
	return sig
}

// tryThenWait makes one try for key, given at least minTry whatever the
// timeout, then waits for a held key until the timeout, counted from the
// start, has passed.
func tryThenWait(ctx context.Context, c *distlock.Client, key string, timeout time.Duration, opts ...distlock.LockOption) (*distlock.Lock, error) {
	end := time.Now().Add(timeout)
	tctx, cancel := context.WithDeadline(ctx, time.Now().Add(max(timeout, minTry)))
	lock, err := c.Acquire(tctx, key, append(slices.Clip(opts), distlock.WithWait(false))...)
	tried := tctx.Err()
	cancel()
	if err == nil || !errors.Is(err, distlock.ErrNotAcquired) || tried != nil {
		return lock, err // granted, failed, or the try itself used up its time
	}
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	return c.Acquire(wctx, key, opts...)
}

// clientLog is the Client's logger: distlock's own with --verbose (renewal
// failures, losses, and so on as they happen); otherwise none, since
// distlock reports the outcome itself, once.
func (r *runner) clientLog() *slog.Logger {
	if r.verbose {
		return r.log
	}
	return nil
}

// heldBy describes the holder of the grant's key, when the backend can
// tell: a permit's semaphore by how many hold and wait; for a lock, its
// exclusive holder, or else how many shared locks hold it (but for a
// shared lock, which they do not keep out). A listing that failed in
// part (a file:// lock file of another key that cannot be read) still
// names the holder it found.
func (r *runner) heldBy(ctx context.Context, c *distlock.Client, b driver.Backend, g grant) string {
	key := g.key
	if g.sem != nil {
		st, err := c.Permits(ctx, key)
		if err != nil {
			return ""
		}
		limit := ""
		if st.Limit > 0 {
			limit = fmt.Sprintf(" of %d", st.Limit)
		}
		return fmt.Sprintf(" (%d%s held, %d waiting)", len(st.Holders), limit, st.Waiting)
	}
	l, ok := b.(driver.Lister)
	if !ok {
		return ""
	}
	hs, _ := l.List(ctx, key)
	readers := 0
	for _, h := range hs {
		switch {
		case h.Key != key:
		case h.Shared:
			readers++
		case h.Owner != "":
			return fmt.Sprintf(" by %s (token %d)", printable(h.Owner), h.Token)
		default:
			return fmt.Sprintf(" (token %d)", h.Token)
		}
	}
	switch {
	case readers == 0 || g.shared:
		return ""
	case readers == 1:
		return " by a shared lock"
	}
	return fmt.Sprintf(" by %d shared locks", readers)
}

// execError is the exit error for err, the failure to find or start the
// command name (as the supervisor reports its own).
func execError(name string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, exec.ErrDot) {
		return &exitError{code: ExitNotFound, err: fmt.Errorf("command not found: %w", err)}
	}
	code, err := supervisor.ExecError(name, err)
	return &exitError{code: code, err: err}
}

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
