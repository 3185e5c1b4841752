package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/visible"
)

// DefaultInterval is the default time between the listings of
// `status --watch` (--interval).
const DefaultInterval = time.Second

// minInterval keeps a watch from hammering the lock service.
const minInterval = 100 * time.Millisecond

type statusFlags struct {
	json      bool
	watch     bool
	interval  time.Duration
	semaphore string // --semaphore NAME: the permits of a semaphore
	readers   string // --readers KEY: the holders of one key, shared ones too
	partition string // --partition GROUP: the assignment of a group
	units     unitFlags
}

func (r *runner) statusCommand() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status [PREFIX]",
		Short: "List the held locks whose key starts with PREFIX",
		Long: `Status lists the current holders of the locks whose key starts with PREFIX
(all locks without it): key, fencing token, owner, how long it has been
held, and how long until the lock service expires it unless renewed
("unbounded" for grants without a time bound, such as file:// locks).
With --verbose it also names the lock service on standard error: the
default is file://` + defaultDirHelp() + `.

A key held by shared locks (run --shared, package rwlock's readers) is
listed once for each of them, after its exclusive holder if any, by
token; when the listing has a shared lock, a MODE column after KEY says
which rows are shared and which exclusive.

With --json it prints a JSON array of {key, token, owner, since, expires,
time_left_seconds, shared}; the token is a string of decimal digits, as
the gateway writes it (a JSON number above 2^53 would lose digits in
JavaScript), expires and time_left_seconds are absent for grants
without a time bound, and shared is present, true, for shared locks.

With --watch it lists them again every --interval until interrupted
(Ctrl-C or SIGTERM), which ends it with status 0. On a terminal
the table is redrawn in place, under a line naming the lock service and
the time, and cut to the terminal's height; otherwise (a pipe, a file,
TERM=dumb) each listing is printed after the last, the same line first
and an empty line after. With --json each listing is one JSON array on
a line of its own. If the first listing fails, status exits as without
--watch; a later failure is shown in its place (on standard error when
not on a terminal) and the next listing tries again.

With file://, a lock file that status cannot read (permission denied)
is named on standard error (under the table on a terminal, with
--watch) and the others are listed; status fails (exit 69) only if it
could read none under PREFIX.

With --semaphore NAME it shows the semaphore NAME instead (the one that
run --permits and package semaphore keep at semaphore/NAME): its stored
limit, how many wait for a permit, and each live permit with its slot
(with --slots), token, owner, time held and time left. With --json it
prints {name, key, limit, waiting, holders}, holders as above with a slot
where the permit has one, and no limit where the service's layout stores
none (zk://, shared with Apache Curator).

With --readers KEY it shows the lock KEY alone: its exclusive holder, if
any, and each of its shared locks (those of run --shared KEY), by token,
as the lock service reports its readers; a service that grants no shared
locks (redlock://) is a usage error (64). With --json it prints {key,
holder, readers}: holder as above or null, readers an array of them.

With --partition GROUP it shows the work partitioning group GROUP (the
one that partition and package partition keep at partition/GROUP/),
given its units as partition is (--units N or --unit NAME...): its live
members (id, member token, units owned and planned, time a member), each
unit with the member it is planned to, its owner and its token, and a
last line saying whether the group is settled (every unit held by the
member it is planned to). With --json it prints {group, settled,
members: [{id, token, since, owned, planned}], units: [{name, planned,
held, owner, token}]}, tokens as strings.`,
		Example: `  distlock status jobs/
  distlock status --watch
  distlock status --watch --interval 5s --json jobs/ | jq -c 'length'
  distlock status --semaphore backups
  distlock status --readers data/catalog
  distlock status --partition billing --units 64`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("want at most one PREFIX, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if cmd.Flags().Changed("partition") {
				return exitWith(r.partitionStatusCommand(cmd, prefix, f))
			}
			if cmd.Flags().Changed("units") || cmd.Flags().Changed("unit") {
				return exitWith(usagef("--units and --unit need --partition"))
			}
			switch {
			case cmd.Flags().Changed("interval") && !f.watch:
				return exitWith(usagef("--interval needs --watch"))
			case f.interval < minInterval:
				return exitWith(usagef("--interval %v is below the minimum, %v", f.interval, minInterval))
			case cmd.Flags().Changed("semaphore") && prefix != "":
				return exitWith(usagef("--semaphore NAME takes no PREFIX"))
			case cmd.Flags().Changed("semaphore") && f.watch:
				return exitWith(usagef("--semaphore does not take --watch"))
			case cmd.Flags().Changed("semaphore") && cmd.Flags().Changed("readers"):
				return exitWith(usagef("--semaphore and --readers exclude each other"))
			case cmd.Flags().Changed("semaphore"):
				return exitWith(r.semaphoreStatus(cmd.Context(), f))
			case cmd.Flags().Changed("readers") && prefix != "":
				return exitWith(usagef("--readers KEY takes no PREFIX"))
			case cmd.Flags().Changed("readers") && f.watch:
				return exitWith(usagef("--readers does not take --watch"))
			case cmd.Flags().Changed("readers"):
				return exitWith(r.readersStatus(cmd.Context(), f))
			}
			return exitWith(r.status(cmd.Context(), prefix, f))
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print a JSON array instead of a table (with --watch, one per line)")
	fl.BoolVarP(&f.watch, "watch", "w", false, "list again every --interval until interrupted, in place on a terminal")
	fl.StringVar(&f.semaphore, "semaphore", "", "show the permits of the semaphore `NAME` (run --permits) instead of locks")
	fl.StringVar(&f.readers, "readers", "", "show the lock `KEY` alone: its exclusive holder and its shared locks (run --shared)")
	fl.StringVar(&f.partition, "partition", "", "show the assignment of the work partitioning group `GROUP` (partition): its members and who owns each unit; needs its --units or --unit")
	f.units.add(fl)
	fl.DurationVar(&f.interval, "interval", DefaultInterval, "with --watch, time between listings (at least "+minInterval.String()+")")
	return cmd
}

// holderJSON is one element of `distlock status --json`. The token is a
// decimal string, as the gateway writes it: a JSON number above 2^53
// loses digits in JavaScript (and in jq before 1.7).
type holderJSON struct {
	Key             string     `json:"key"`
	Token           uint64     `json:"token,string"`
	Owner           string     `json:"owner,omitempty"`
	Since           *time.Time `json:"since,omitempty"`
	Expires         *time.Time `json:"expires,omitempty"`           // absent: no time bound
	TimeLeftSeconds *float64   `json:"time_left_seconds,omitempty"` // absent: no time bound
	Slot            *int       `json:"slot,omitempty"`              // a permit's, with --slots
	Shared          bool       `json:"shared,omitempty"`            // a shared lock's
}

func (r *runner) status(ctx context.Context, prefix string, f statusFlags) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, closer, err := openToList(ctx, r.backendURL, r.openers)
	if err != nil {
		return err
	}
	defer closer.Close()
	where := describeBackend(b, r.backendURL)
	r.log.Debug("listing holders", "backend", where, "prefix", prefix)
	lister, ok := b.(driver.Lister)
	if !ok {
		return usagef("backend %s cannot list lock holders", redact(r.backendOrDefault()))
	}
	if f.watch {
		wl := &watchLister{r: r, lister: lister}
		defer wl.Close()
		return r.watch(ctx, wl, where, prefix, f)
	}
	hs, unread, err := listHolders(ctx, lister, prefix, where)
	for _, u := range unread {
		fmt.Fprintf(r.stderr, "distlock: %s\n", printable(u))
	}
	if err != nil {
		return err
	}
	now := time.Now()
	if f.json {
		data, err := json.MarshalIndent(holdersJSON(hs, now), "", "  ")
		if err != nil {
			return err
		}
		_, err = r.stdout.Write(append(visible.JSON(data), '\n'))
		return err
	}
	if len(hs) == 0 {
		// Said on stderr: stdout stays empty for scripts.
		among := ""
		if len(unread) > 0 {
			among = " among the lock files read"
		}
		if prefix != "" {
			fmt.Fprintf(r.stderr, "distlock: no lock held under %q%s on %s\n", prefix, among, where)
		} else {
			fmt.Fprintf(r.stderr, "distlock: no lock held%s on %s\n", among, where)
		}
		return nil
	}
	return writeTable(r.stdout, hs, now)
}

// listHolders lists the holders under prefix through lister, which is the
// backend named where. A file:// listing that could not read some lock
// files lists the others: they are returned in unread, said as lines for
// standard error, and the listing fails only if it read none.
func listHolders(ctx context.Context, lister driver.Lister, prefix, where string) (hs []driver.Holder, unread []string, err error) {
	hs, err = lister.List(ctx, prefix)
	files, listed, ok := unreadFiles(err)
	if !ok {
		return hs, nil, err
	}
	for _, f := range files {
		unread = append(unread, "cannot tell whether a lock is held: "+f.Error())
	}
	if !listed {
		under := ""
		if prefix != "" {
			under = fmt.Sprintf(" under %q", prefix)
		}
		return nil, unread, fmt.Errorf("could not read any lock file%s on %s", under, where)
	}
	return hs, unread, nil
}

// holdersJSON is the document of `distlock status --json` for hs at now.
func holdersJSON(hs []driver.Holder, now time.Time) []holderJSON {
	out := make([]holderJSON, 0, len(hs))
	for _, h := range hs {
		j := holderJSON{Key: h.Key, Token: h.Token, Owner: h.Owner, Shared: h.Shared}
		if h.HasSlot {
			j.Slot = &h.Slot
		}
		if !h.Since.IsZero() {
			j.Since = &h.Since
		}
		if !h.Expires.IsZero() {
			left := max(h.Expires.Sub(now), 0).Seconds()
			j.Expires, j.TimeLeftSeconds = &h.Expires, &left
		}
		out = append(out, j)
	}
	return out
}

// writeTable writes the status table of hs at now, keys and owners
// escaped for a terminal. When a holder is shared, a MODE column follows
// KEY: a listing without shared locks keeps the columns it always had.
func writeTable(w io.Writer, hs []driver.Holder, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	modes := slices.ContainsFunc(hs, func(h driver.Holder) bool { return h.Shared })
	if modes {
		fmt.Fprintln(tw, "KEY\tMODE\tTOKEN\tOWNER\tHELD FOR\tTIME LEFT")
	} else {
		fmt.Fprintln(tw, "KEY\tTOKEN\tOWNER\tHELD FOR\tTIME LEFT")
	}
	for _, h := range hs {
		owner, held, left := columns(h, now)
		if modes {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", printable(h.Key), mode(h), h.Token, owner, held, left)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", printable(h.Key), h.Token, owner, held, left)
		}
	}
	return tw.Flush()
}

// mode is the MODE column of h: shared or exclusive.
func mode(h driver.Holder) string {
	if h.Shared {
		return "shared"
	}
	return "exclusive"
}

// columns returns the OWNER, HELD FOR and TIME LEFT columns of h at now.
func columns(h driver.Holder, now time.Time) (owner, held, left string) {
	owner, held, left = printable(h.Owner), "-", "unbounded"
	if owner == "" {
		owner = "-"
	}
	if !h.Since.IsZero() {
		held = span(now.Sub(h.Since))
	}
	if !h.Expires.IsZero() {
		left = span(h.Expires.Sub(now))
	}
	return owner, held, left
}

// printable returns s for a terminal (see visible.Quote): as it is if
// every character prints, else Go-quoted, with its control characters,
// invisible format characters (bidirectional controls, zero-width
// characters) and invalid UTF-8 escaped. Keys and owners come from the
// lock service, where anyone with access may have written escape
// sequences or a newline that would forge a row, or a U+202E that shows
// a name backwards.
func printable(s string) string { return visible.Quote(s) }

// span shows a duration in the status table: tenths of a second below a
// minute, whole seconds from then on; never negative.
func span(d time.Duration) string {
	d = max(d, 0)
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}
