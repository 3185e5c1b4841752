package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
)

func (r *runner) statusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [PREFIX]",
		Short: "List the held locks whose key starts with PREFIX",
		Long: `Status lists the current holders of the locks whose key starts with PREFIX
(all locks without it): key, fencing token, owner, how long it has been
held, and how long until the lock service expires it unless renewed
("unbounded" for grants without a time bound, such as file:// locks).
With --verbose it also names the lock service on standard error: the
default is file://` + defaultDirHelp() + `.`,
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
			return exitWith(r.status(cmd.Context(), prefix, asJSON))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	return cmd
}

// holderJSON is one element of `distlock status --json`.
type holderJSON struct {
	Key             string     `json:"key"`
	Token           uint64     `json:"token"`
	Owner           string     `json:"owner,omitempty"`
	Since           *time.Time `json:"since,omitempty"`
	Expires         *time.Time `json:"expires,omitempty"`           // absent: no time bound
	TimeLeftSeconds *float64   `json:"time_left_seconds,omitempty"` // absent: no time bound
}

func (r *runner) status(ctx context.Context, prefix string, asJSON bool) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, closer, err := openToList(ctx, r.backendURL, r.openers)
	if err != nil {
		return err
	}
	defer closer.Close()
	r.log.Debug("listing holders", "backend", describeBackend(b, r.backendURL), "prefix", prefix)
	lister, ok := b.(distlock.Lister)
	if !ok {
		return usagef("backend %s cannot list lock holders", redact(r.backendOrDefault()))
	}
	hs, err := lister.List(ctx, prefix)
	if err != nil {
		return err
	}
	now := time.Now()
	if asJSON {
		out := make([]holderJSON, 0, len(hs))
		for _, h := range hs {
			j := holderJSON{Key: h.Key, Token: h.Token, Owner: h.Owner}
			if !h.Since.IsZero() {
				j.Since = &h.Since
			}
			if !h.Expires.IsZero() {
				left := max(h.Expires.Sub(now), 0).Seconds()
				j.Expires, j.TimeLeftSeconds = &h.Expires, &left
			}
			out = append(out, j)
		}
		enc := json.NewEncoder(r.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(hs) == 0 {
		// Said on stderr: stdout stays empty for scripts.
		where := describeBackend(b, r.backendURL)
		if prefix != "" {
			fmt.Fprintf(r.stderr, "distlock: no lock held under %q on %s\n", prefix, where)
		} else {
			fmt.Fprintf(r.stderr, "distlock: no lock held on %s\n", where)
		}
		return nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOKEN\tOWNER\tHELD FOR\tTIME LEFT")
	for _, h := range hs {
		owner, held, left := printable(h.Owner), "-", "unbounded"
		if owner == "" {
			owner = "-"
		}
		if !h.Since.IsZero() {
			held = span(now.Sub(h.Since))
		}
		if !h.Expires.IsZero() {
			left = span(h.Expires.Sub(now))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", printable(h.Key), h.Token, owner, held, left)
	}
	return tw.Flush()
}

// printable returns s for a terminal: as it is if every character prints
// (and it does not begin with a double quote), else Go-quoted, with its
// control characters, invalid UTF-8 and invisible format characters
// escaped. Keys and owners come from the lock service, where anyone with
// access may have written escape sequences or a newline that would forge a
// row.
func printable(s string) string {
	if strings.HasPrefix(s, `"`) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// span shows a duration in the status table: tenths of a second below a
// minute, whole seconds from then on; never negative.
func span(d time.Duration) string {
	d = max(d, 0)
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}
