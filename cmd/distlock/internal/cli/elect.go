package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
)

type electFlags struct {
	value string
	ttl   time.Duration
	grace time.Duration
}

func (r *runner) electCommand() *cobra.Command {
	var f electFlags
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME -- COMMAND [ARG...]",
		Short: "Run a command while leading the election NAME",
		Long: `Elect campaigns in the election NAME (package election: the lock of the
key election/NAME, with the candidate's value as its owner; on etcd://,
etcd's own election layout, which etcdctl elect shares) and waits until it
is elected. It then runs COMMAND as run does, with DISTLOCK_TOKEN set to
the term's fencing token, DISTLOCK_KEY to election/NAME and
DISTLOCK_BACKEND as for run, and keeps the term while it runs. When the
command exits, distlock resigns, so that the next candidate is elected at
once, and exits with the command's status.

--value is what distlock leader, distlock status and the other
candidates see as the leader's value (default host:pid, the owner that run
stores with its locks). If the term is lost while the command runs, the
command is ended as run ends it on the loss of its lock (SIGTERM, then
SIGKILL after --grace; the supervisor keeps the term's deadline too), and
distlock exits 76. Signals are forwarded to the command as by run; one that
arrives while distlock is campaigning ends the campaign and the command is
not started. Exit codes are run's (75 does not occur: elect waits until
elected).`,
		Example: `  distlock elect --value "$(hostname):8080" payments/leader -- ./serve-as-leader
  distlock --backend etcd://10.0.0.1:2379 elect scheduler -- ./scheduler`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case dash < 0 && len(args) == 0:
				return usagef("missing NAME and -- COMMAND")
			case dash < 0:
				return usagef(`missing "--" between NAME and the command: distlock elect [flags] NAME -- COMMAND [ARG...]`)
			case dash == 0:
				return usagef("missing NAME before --")
			case dash > 1:
				return usagef("want one NAME before --, got %d: %q", dash, args[:dash])
			case len(args) == dash:
				return usagef("missing the command after --")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitWith(r.elect(cmd.Context(), args[0], args[1:], f))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.value, "value", "", "the leader's value, which distlock leader shows (default host:pid)")
	fl.DurationVar(&f.ttl, "ttl", distlock.DefaultTTL, "lease TTL of the term, as for run (zk:// takes 5/12 of its session timeout); renewed every TTL/3, or halfway to its deadline when sooner")
	fl.DurationVar(&f.grace, "grace", DefaultGrace, "after the term is lost, time between SIGTERM and SIGKILL to the command, as for run")
	return cmd
}

// checkElection checks the election's name, as election.New does, before
// the lock service is opened.
func checkElection(name string) error {
	if name == "" {
		return usagef("invalid election NAME: empty")
	}
	if err := distlock.ValidateKey(election.KeyPrefix + name); err != nil {
		return fmt.Errorf("election NAME %q: %w", name, err)
	}
	return nil
}

// defaultValue is the leader's value without --value: the owner that the
// Client stores with run's locks, host:pid.
func defaultValue() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

func (r *runner) elect(ctx context.Context, name string, argv []string, f electFlags) error {
	if err := checkElection(name); err != nil {
		return err
	}
	if f.value == "" {
		f.value = defaultValue()
	}
	if err := driver.CheckOwner(f.value); err != nil {
		return usagef("--value: %w", err)
	}
	b, c, closeClient, err := r.openSupervised(ctx, 0, f.ttl, f.grace)
	if err != nil {
		return err
	}
	defer closeClient()
	e, err := election.New(c, name)
	if err != nil {
		return err
	}

	// Signals as for run: they end the campaign, then are forwarded.
	sigc := make(chan os.Signal, 16)
	notify(sigc, waitSignals)
	defer signal.Stop(sigc)

	r.log.Debug("campaigning", "election", name, "value", f.value, "backend", describeBackend(b, r.backendURL))
	var term *election.Term
	sig := untilSignal(ctx, sigc, func(sctx context.Context) { term, err = e.Campaign(sctx, f.value) })
	switch {
	case sig != nil:
		if term != nil {
			term.Resign(context.WithoutCancel(ctx))
		}
		return &exitError{code: ExitSignal + signum(sig), err: fmt.Errorf("interrupted by %v while campaigning in the election %q", sig, name), sig: dyingSignal(sig)}
	case err != nil:
		return err
	}
	l := leadership{Lock: term.Lock(), name: name}
	return r.supervise(ctx, l, b, argv, runFlags{ttl: f.ttl, grace: f.grace}, sigc)
}

// leadership is the term of `elect`: the term's lock (election.Term.Lock),
// which has the term's deadline, and whose Release is the term's Resign.
type leadership struct {
	*distlock.Lock
	name string
}

func (l leadership) describe() string {
	return fmt.Sprintf("the leadership of the election %q", l.name)
}
