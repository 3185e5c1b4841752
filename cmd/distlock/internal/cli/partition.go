package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/partition"
)

// MaxUnitCommands is the most units that partition takes (--units or
// --unit): a member alone in its group owns every unit, and each unit
// owned runs its command under a supervisor process of its own, which
// keeps an OS thread of distlock (a Go program dies past 10,000) and a
// few descriptors while it runs. The package partition, which runs no
// command, takes up to partition.MaxUnits.
const MaxUnitCommands = 4096

// unitFlags name a group's units: --units N or --unit NAME (repeated).
type unitFlags struct {
	count int
	names []string
}

// list returns the group's units, or a usage error.
func (u unitFlags) list(cmd *cobra.Command, group string) ([]string, error) {
	counted, named := cmd.Flags().Changed("units"), cmd.Flags().Changed("unit")
	switch {
	case counted && named:
		return nil, usagef("--units and --unit exclude each other")
	case !counted && !named:
		return nil, usagef("the group's units are required: --units N, or --unit NAME for each")
	case counted && (u.count < 1 || u.count > partition.MaxUnits):
		return nil, usagef("--units %d is not in [1, %d]", u.count, partition.MaxUnits)
	case counted:
		return partition.Count(u.count), nil
	case len(u.names) > partition.MaxUnits:
		return nil, usagef("%d units (--unit), more than %d", len(u.names), partition.MaxUnits)
	}
	seen := map[string]bool{}
	for _, n := range u.names {
		if err := checkPartitionName(group, "--unit", n, "units/"); err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, usagef("--unit %q is given twice", n)
		}
		seen[n] = true
	}
	return u.names, nil
}

func (u *unitFlags) add(fl interface {
	IntVar(*int, string, int, string)
	StringArrayVar(*[]string, string, []string, string)
}) {
	fl.IntVar(&u.count, "units", 0, `the group's units are "0" to "N-1"`)
	fl.StringArrayVar(&u.names, "unit", nil, "a unit of the group, by `NAME` (repeat for each; instead of --units); every member must name the same units")
}

// checkPartitionName checks a group, member id or unit name before the
// lock service is opened, as partition.New does: what is the flag or
// argument, sub the part of the key after the group.
func checkPartitionName(group, what, name, sub string) error {
	switch {
	case name == "":
		return usagef("%s: empty", what)
	case sub != "" && strings.Contains(name, "/"):
		return usagef("%s %q contains \"/\", which a unit or member name cannot", what, name)
	}
	key := partition.KeyPrefix + group + "/" + sub + name
	if sub == "" {
		key = partition.KeyPrefix + group + "/units/0"
	}
	if err := distlock.ValidateKey(key); err != nil {
		return usagef("%s %q: %w", what, name, err)
	}
	return nil
}

type partitionFlags struct {
	units     unitFlags
	member    string
	reconcile time.Duration
	minHold   time.Duration
	ttl       time.Duration
	grace     time.Duration
}

func (r *runner) partitionCommand() *cobra.Command {
	var f partitionFlags
	cmd := &cobra.Command{
		Use:   "partition [flags] GROUP (--units N | --unit NAME...) -- COMMAND [ARG...]",
		Short: "Share units of work among the members of GROUP, running a command for each unit owned",
		Long: `Partition makes distlock a member of the group GROUP (package partition),
which shares a fixed list of units among its live members, and runs
COMMAND once for each unit this member owns, all at once, each with
DISTLOCK_UNIT (the unit's name), DISTLOCK_TOKEN (the fencing token of
this ownership of the unit: greater than every earlier owner's),
DISTLOCK_KEY (the unit's lock, partition/GROUP/units/UNIT),
DISTLOCK_GROUP, DISTLOCK_MEMBER and DISTLOCK_BACKEND (as for run) in its
environment. The units are "0" to "N-1" with --units N, or those named
with --unit; every member of a group must be given the same units.
--member is this member's id (default HOST-PID): a member is the lock
partition/GROUP/members/ID, and a unit's owner holds the unit's lock with
its member id as owner, so that status partition/GROUP/ lists a group and
status --partition shows its assignment.

Units are spread evenly (shares differ by one unit at most): every
--reconcile interval each member reads the group's members and takes the
units planned to it; a unit planned elsewhere (a member joined) is given
up once held for --min-hold: its command gets SIGTERM, then SIGKILL
after --grace, and once the command's process group is gone the unit's
lock is released and the new owner, already waiting for it, starts its
command at once. A member that dies leaves its units to the others when
its locks lapse (--ttl; at once on file://).

Each command runs as run runs its command, through a supervisor and in a
process group of its own, but without the terminal and with /dev/null as
standard input (the commands share distlock's output and error): if the unit's lock is lost, the group gets
SIGTERM, then SIGKILL after --grace, and the unit is taken again when it
is planned here; the supervisor keeps the lock's deadline, and kills the
group if distlock dies (at once on Linux), as for run. A command that
exits 0 is started again, with a new token, at the next reconcile while
its unit is still planned here. A command that fails (any other status,
or killed by a signal that distlock did not send) ends partition: every
other unit's command is ended (SIGTERM, then SIGKILL after --grace),
every lock released, and distlock exits with the command's status
(128+n for signal n), as run does. SIGHUP, SIGINT, SIGQUIT and SIGTERM
sent to distlock end every command the same way, release everything,
and distlock then dies of that signal (exits 128+n where it cannot);
SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGWINCH and SIGCONT are forwarded
to every command's group. Once the commands are being ended, further
signals, SIGHUP, SIGINT, SIGQUIT and SIGTERM too (a second Ctrl-C), are
forwarded as they are to every command's group that is left, as run
forwards them: a command may take a second one as a call to hurry;
SIGKILL still comes only after --grace (give a shorter --grace for a
quicker end).

A command's DISTLOCK_UNIT, DISTLOCK_GROUP and DISTLOCK_MEMBER are its
own: a distlock run (or partition, or elect) inside it does not pass
them on to its command, nor the outer DISTLOCK_KEY and DISTLOCK_TOKEN.

A member alone in its group owns every unit, and each unit owned runs
a supervisor process, the command, and an OS thread of distlock while
it runs: partition takes at most ` + strconv.Itoa(MaxUnitCommands) + ` units (--units or --unit),
more is a usage error (64); the package partition takes up to 65536.

The lock service must list holders (else exit 64). On postgres:// with
session locks every lock held takes a connection of the pool, and a
member alone holds every unit: without pool_max_conns in the URL the
pool gets the units plus two connections; less than that is a usage
error (64). Exit codes are run's: 64 usage
(no units, --units 0 or above ` + strconv.Itoa(MaxUnitCommands) + `, a unit or member name with
"/", no command), 69 the lock service failed, 70 a supervisor failed,
126/127 a command that cannot be run.`,
		Example: `  # four workers on four hosts share 64 shards
  distlock --backend etcd://10.0.0.1:2379 partition billing --units 64 -- ./bill-shard.sh

  # named units, a stable member id, quick reconciles
  distlock partition feeds --unit eu --unit us --unit asia --member "$(hostname)" --reconcile 500ms -- sh -c 'exec ./feed "$DISTLOCK_UNIT" "$DISTLOCK_TOKEN"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case dash < 0 && len(args) == 0:
				return usagef("missing GROUP and -- COMMAND")
			case dash < 0:
				return usagef(`missing "--" between GROUP and the command: distlock partition [flags] GROUP --units N -- COMMAND [ARG...]`)
			case dash == 0:
				return usagef("missing GROUP before --")
			case dash > 1:
				return usagef("want one GROUP before --, got %d: %q", dash, args[:dash])
			case len(args) == dash:
				return usagef("missing the command after --")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			units, err := f.units.list(cmd, args[0])
			if err != nil {
				return exitWith(err)
			}
			if len(units) > MaxUnitCommands {
				return exitWith(usagef("%d units, more than the %d that partition runs commands for: a member alone in its group owns every unit, and runs a command under a supervisor for each", len(units), MaxUnitCommands))
			}
			return exitWith(r.partition(cmd.Context(), args[0], units, args[1:], f))
		},
	}
	fl := cmd.Flags()
	f.units.add(fl)
	fl.StringVar(&f.member, "member", "", "this member's id, unique among the group's live members, without \"/\" (default HOST-PID)")
	fl.DurationVar(&f.reconcile, "reconcile", partition.DefaultReconcile, "how often the member reads the group's members and takes or gives up units (±25%)")
	fl.DurationVar(&f.minHold, "min-hold", partition.DefaultMinHold, "how long a unit is kept at least before it is given up to a member that joined")
	fl.DurationVar(&f.ttl, "ttl", distlock.DefaultTTL, "lease TTL of the member's and the units' locks, as for run (zk:// takes 5/12 of its session timeout)")
	fl.DurationVar(&f.grace, "grace", DefaultGrace, "time between SIGTERM and SIGKILL to a unit's command when it is ended, as for run")
	return cmd
}

// unitLock is the lock of one unit, which a command runs under. The
// partition releases it once the command has ended: Release does nothing.
type unitLock struct {
	*distlock.Lock
	group, unit, member string
}

func (l unitLock) describe() string {
	return fmt.Sprintf("the unit %q of group %q", l.unit, l.group)
}

func (l unitLock) Release(context.Context) error { return nil }

func (l unitLock) env() []string {
	return []string{"DISTLOCK_UNIT=" + l.unit, "DISTLOCK_GROUP=" + l.group, "DISTLOCK_MEMBER=" + l.member}
}

// relay passes signals on to the commands of the units held.
type relay struct {
	mu    sync.Mutex
	units map[chan os.Signal]bool
}

func (rl *relay) add() chan os.Signal {
	c := make(chan os.Signal, 16)
	rl.mu.Lock()
	rl.units[c] = true
	rl.mu.Unlock()
	return c
}

func (rl *relay) remove(c chan os.Signal) {
	rl.mu.Lock()
	delete(rl.units, c)
	rl.mu.Unlock()
}

func (rl *relay) send(s os.Signal) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for c := range rl.units {
		select {
		case c <- s:
		default:
		}
	}
}

// unitFailure is a unit's command that failed: it ends partition.
type unitFailure struct {
	unit string
	err  error // supervise's
}

func (e *unitFailure) Error() string { return e.err.Error() }

func (r *runner) partition(ctx context.Context, group string, units, argv []string, f partitionFlags) error {
	if group == "" {
		return usagef("GROUP: empty")
	}
	if err := checkPartitionName(group, "GROUP", group, ""); err != nil {
		return err
	}
	if f.member != "" {
		if err := checkPartitionName(group, "--member", f.member, "members/"); err != nil {
			return err
		}
	}
	switch {
	case f.reconcile <= 0:
		return usagef("--reconcile %v is not positive", f.reconcile)
	case f.minHold < 0:
		return usagef("--min-hold %v is negative", f.minHold)
	}
	// The lock service is opened with the pool a member needs; the
	// commands get the URL as given (DISTLOCK_BACKEND).
	sized, err := partitionPool(r.backendURL, len(units))
	if err != nil {
		return err
	}
	open := *r
	open.backendURL = sized
	b, c, closeClient, err := open.openSupervised(ctx, 0, f.ttl, f.grace)
	if err != nil {
		return err
	}
	defer closeClient()
	opts := []partition.Option{partition.WithReconcile(f.reconcile), partition.WithMinHold(f.minHold)}
	if f.member != "" {
		opts = append(opts, partition.WithMember(f.member))
	}
	p, err := partition.New(c, group, units, opts...)
	if err != nil {
		return err
	}
	if _, err := c.List(ctx, p.MemberKey(p.Member())); errors.Is(err, errors.ErrUnsupported) {
		return usagef("backend %s cannot list lock holders, which the members of a group read", redact(r.backendOrDefault()))
	}
	if _, passed := commandEnv(nil, r.backendURL, "", 0, -1); !passed {
		fmt.Fprintf(r.stderr, "distlock: the commands get no DISTLOCK_BACKEND: %s cannot be passed on without its password; a distlock inside a command uses file:// unless given --backend\n",
			redact(r.backendURL))
	}
	if _, err := execPath(argv); err != nil {
		return err
	}

	// The first of the signals that would end distlock ends every unit's
	// command and then distlock; the others, and those that come while
	// the commands end (a second Ctrl-C), are relayed to every command
	// still running, until Run returns.
	sigc := make(chan os.Signal, 16)
	notify(sigc, waitSignals)
	notify(sigc, relayedSignals())
	defer signal.Stop(sigc)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rl := &relay{units: map[chan os.Signal]bool{}}
	var (
		endSig  os.Signal
		ran     = make(chan struct{})
		sigDone = make(chan struct{})
	)
	go func() {
		defer close(sigDone)
		for {
			select {
			case <-ran:
				return
			case s := <-sigc:
				if isWaitSignal(s) && pctx.Err() == nil {
					r.log.Debug("ending every unit's command", "signal", s)
					endSig = s
					cancel()
					continue
				}
				r.log.Debug("forwarding signal to every unit's command", "signal", s)
				rl.send(s)
			}
		}
	}()

	r.log.Debug("joining", "group", group, "member", p.Member(), "units", len(units), "backend", describeBackend(b, r.backendURL))
	err = p.Run(pctx, func(uctx context.Context, u partition.Unit) error {
		usig := rl.add()
		defer rl.remove(usig)
		// supervise ends the command as run does: on the loss of the
		// lock (the lock's Done) through the supervisor, and on sctx's
		// end (a move, the member's end, distlock's) with SIGTERM and
		// SIGKILL after --grace.
		sctx, scancel := context.WithCancel(context.WithoutCancel(uctx))
		defer scancel()
		stop := context.AfterFunc(uctx, func() {
			select {
			case <-u.Lock.Done():
			default:
				scancel()
			}
		})
		defer stop()
		l := unitLock{Lock: u.Lock, group: group, unit: u.Name, member: p.Member()}
		err := r.supervise(sctx, l, b, argv, runFlags{ttl: f.ttl, grace: f.grace, unit: true}, usig)
		var ee *exitError
		switch {
		case errors.As(err, &ee) && ee.err == nil && ee.code == ExitOK:
			return nil // started again at the next reconcile, if still here
		case u.Lock.Err() != nil:
			// Lost (the unit is released only after this returns, so an
			// error of its lock here is a loss, whatever ended uctx):
			// said once, and taken again when planned here.
			fmt.Fprintf(r.stderr, "distlock: unit %q: %v\n", u.Name, err)
			return nil
		case uctx.Err() != nil:
			r.log.Debug("unit given up", "unit", u.Name, "cause", context.Cause(uctx), "status", err)
			return nil
		case errors.As(err, &ee) && ee.code == ExitLockLost && ee.err != nil:
			// The supervisor ended the command as the lock's deadline
			// neared without a renewal: a loss for the command.
			fmt.Fprintf(r.stderr, "distlock: unit %q: %v; the unit is given up, and taken again when planned here\n", u.Name, err)
			return nil
		}
		return &unitFailure{unit: u.Name, err: err}
	})
	cancel()
	close(ran)
	<-sigDone
	var uf *unitFailure
	switch {
	case endSig != nil:
		return &exitError{code: ExitSignal + signum(endSig), sig: dyingSignal(endSig)}
	case errors.As(err, &uf):
		var ee *exitError
		if !errors.As(uf.err, &ee) {
			return fmt.Errorf("unit %q: %w", uf.unit, uf.err)
		}
		msg := ee.err
		if msg == nil {
			msg = errors.New("the command " + describeStatus(ee))
		}
		return &exitError{code: ee.code, sig: ee.sig,
			err: fmt.Errorf("unit %q: %w; every other unit's command was ended and every lock released", uf.unit, msg)}
	case ctx.Err() != nil:
		return nil // Run's context: the caller ended it
	case errors.Is(err, errors.ErrUnsupported):
		return usagef("%v", err)
	}
	return err
}

// partitionPool returns rawURL sized for a member of a group of units on
// postgres:// in session mode, where each lock held keeps a connection of
// the pool: a member alone holds its own lock and every unit's, and reads
// the group besides, units+2 connections. Without pool_max_conns (pgx's
// default is 4, or the number of CPUs) the member would hold what the
// pool has and wait for the rest for ever, owning fewer units than
// planned and handing none off: the URL gets pool_max_conns=units+2. A
// pool_max_conns below that is a usage error. Any other URL, lease mode
// and a URL that does not parse (opening it says what is wrong) are
// returned as they are.
func partitionPool(rawURL string, units int) (string, error) {
	u, ok := sessionLocksURL(rawURL)
	if !ok {
		return rawURL, nil
	}
	need := units + 2
	if strings.Count(rawURL[strings.LastIndexByte(rawURL, '@')+1:], "pool_max_conns=") > 1 {
		return rawURL, nil // given twice: opening it says so
	}
	if v, ok := u.Get("pool_max_conns"); ok {
		if n, err := strconv.Atoi(v); err == nil && n < need {
			return "", usagef("pool_max_conns=%d in the backend URL is too small for %d units: with session locks each lock held keeps a connection, and a member alone holds every unit, its own lock and a connection to read the group; give at least %d, or leave it out", n, units, need)
		}
		return rawURL, nil
	}
	sep := "?"
	if strings.Contains(rawURL[strings.LastIndexByte(rawURL, '@')+1:], "?") {
		sep = "&"
	}
	return rawURL + sep + "pool_max_conns=" + strconv.Itoa(need), nil
}

// describeStatus names the exit status of ee, a command's own.
func describeStatus(ee *exitError) string {
	if ee.code > ExitSignal && ee.code < ExitSignal+65 {
		n := syscall.Signal(ee.code - ExitSignal)
		return fmt.Sprintf("was killed by signal %d (%v)", int(n), n)
	}
	return "exited with status " + strconv.Itoa(ee.code)
}

// execPath resolves the command, as supervise does for each unit, so
// that a command that cannot be found fails at once.
func execPath(argv []string) (string, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return "", execError(argv[0], err)
	}
	return path, nil
}

func isWaitSignal(s os.Signal) bool {
	for _, w := range waitSignals {
		if s == w {
			return true
		}
	}
	return false
}
