package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/internal/visible"
)

type leaderFlags struct {
	json  bool
	watch bool
}

func (r *runner) leaderCommand() *cobra.Command {
	var f leaderFlags
	cmd := &cobra.Command{
		Use:   "leader [--json] [--watch] NAME",
		Short: "Show the leader of the election NAME",
		Long: `Leader prints the leader of the election NAME (see elect) as the lock
service has it now: its value and the token of its term, as

  VALUE (term TOKEN)

With no leader it says so on standard error and exits 1, which no other
outcome of leader gives (64 usage, 69 lock service failed). The value is
what anyone with access to the service wrote: one with a character that
does not print is shown Go-quoted, with escapes.

With --watch it prints the leader, then a line at each change (a new term,
a new value, "no leader" when the term ends) until interrupted (Ctrl-C or
SIGTERM), which ends it with status 0. It is woken by the service where
the backend can watch a key, and reads every second where it cannot; it
shows states, not every event: a term that begins and ends between two
reads is not seen.

With --json each line is a JSON object {election, leader, value, token}:
leader is false (and value and token absent) when there is none; the
token is a string of decimal digits, as status writes it. Without --watch,
no leader prints {"election": NAME, "leader": false} and exits 1.`,
		Example: `  distlock leader payments/leader
  distlock leader --watch --json payments/leader | jq -r .value`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want one election NAME, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitWith(r.leader(cmd.Context(), args[0], f))
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print a JSON object per line")
	fl.BoolVarP(&f.watch, "watch", "w", false, "print a line at each change of leader until interrupted")
	return cmd
}

// leaderJSON is a line of `distlock leader --json`. The token is a
// decimal string, as in status: a JSON number above 2^53 loses digits in
// JavaScript.
type leaderJSON struct {
	Election string  `json:"election"`
	Leader   bool    `json:"leader"`
	Value    *string `json:"value,omitempty"`
	Token    uint64  `json:"token,string,omitempty"`
}

func (r *runner) leader(ctx context.Context, name string, f leaderFlags) error {
	if err := checkElection(name); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Reading a leader changes nothing: a lock directory is not created
	// to say that there is none.
	b, closer, err := openToList(ctx, r.backendURL, r.openers)
	if err != nil {
		return err
	}
	defer closer.Close()
	where := describeBackend(b, r.backendURL)
	if d, missing := b.(emptyDir); missing {
		wl := &watchLister{r: r, lister: d}
		defer wl.Close()
		b = lookingDir{wl}
	}
	c, err := distlock.New(b, distlock.WithLogger(r.clientLog()))
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		c.Close(cctx)
	}()
	e, err := election.New(c, name)
	if err != nil {
		return err
	}
	r.log.Debug("reading the leader", "election", name, "backend", where, "watch", f.watch)

	// The first read fails as without --watch; Observe would try again
	// silently.
	l, err := e.Leader(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return usagef("backend %s cannot read lock holders", redact(r.backendOrDefault()))
	case errors.Is(err, election.ErrNoLeader):
	case err != nil:
		return err
	}
	if !f.watch {
		if l.Token != 0 || f.json {
			if err := r.writeLeader(name, l, f); err != nil {
				return err
			}
		}
		switch {
		case l.Token != 0:
			return nil
		case f.json:
			return &exitError{code: ExitNoLeader}
		}
		return &exitError{code: ExitNoLeader, err: fmt.Errorf("no leader in the election %q on %s", name, where)}
	}
	for l := range e.Observe(ctx) {
		if err := r.writeLeader(name, l, f); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // interrupted: the normal end of a watch
	}
	return fmt.Errorf("%w: the watch of the election %q ended", errInternal, name)
}

// writeLeader writes the line of l, Token 0 for no leader, with what the
// service stored escaped for a terminal.
func (r *runner) writeLeader(name string, l election.Leader, f leaderFlags) error {
	var line []byte
	switch {
	case f.json:
		j := leaderJSON{Election: name, Leader: l.Token != 0, Token: l.Token}
		if l.Token != 0 {
			j.Value = &l.Value
		}
		data, err := json.Marshal(j)
		if err != nil {
			return err
		}
		line = visible.JSON(data)
	case l.Token == 0:
		line = []byte("no leader")
	default:
		v := printable(l.Value)
		if v == "" {
			v = `""`
		}
		line = []byte(v + " (term " + strconv.FormatUint(l.Token, 10) + ")")
	}
	_, err := r.stdout.Write(append(line, '\n'))
	return err
}

// lookingDir is a lock directory that did not exist when `leader` began:
// each read looks for it again (see watchLister), so that a watch sees the
// first leader elected there.
type lookingDir struct{ *watchLister }

func (lookingDir) Acquire(context.Context, string, driver.AcquireOptions) (driver.Lease, error) {
	return nil, usagef("leader acquires nothing")
}
