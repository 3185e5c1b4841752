package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/visible"
	"github.com/distlock/distlock/partition"
)

// partitionJSON is the document of `distlock status --partition GROUP
// --json`. Tokens are decimal strings, as in holderJSON.
type partitionJSON struct {
	Group   string              `json:"group"`
	Settled bool                `json:"settled"`
	Members []partitionMemberJS `json:"members"`
	Units   []partitionUnitJS   `json:"units"`
}

type partitionMemberJS struct {
	ID      string     `json:"id"`
	Token   uint64     `json:"token,string"`
	Since   *time.Time `json:"since,omitempty"`
	Owned   int        `json:"owned"`
	Planned int        `json:"planned"`
}

type partitionUnitJS struct {
	Name    string `json:"name"`
	Planned string `json:"planned,omitempty"` // absent: no member
	Held    bool   `json:"held"`
	Owner   string `json:"owner,omitempty"`        // absent: free, or no owner stored
	Token   uint64 `json:"token,string,omitempty"` // absent: free
}

// partitionStatus shows the assignment of the group f.partition: its
// members and, for each of its units, the member it is planned to and
// its holder.
func (r *runner) partitionStatus(ctx context.Context, units []string, f statusFlags) error {
	group := f.partition
	if group == "" {
		return usagef("--partition needs a GROUP")
	}
	if err := checkPartitionName(group, "--partition", group, ""); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, closer, err := openToList(ctx, r.backendURL, r.openers)
	if err != nil {
		return err
	}
	defer closer.Close()
	where := describeBackend(b, r.backendURL)
	c, err := distlock.New(b)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	p, err := partition.New(c, group, units, partition.WithMember("status"))
	if err != nil {
		return err
	}
	r.log.Debug("reading the group", "backend", where, "group", group)
	a, err := p.Assignment(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		return usagef("backend %s cannot list lock holders", redact(r.backendOrDefault()))
	}
	if err != nil {
		return err
	}
	if f.json {
		doc := partitionJSON{Group: group, Settled: a.Settled(), Members: []partitionMemberJS{}, Units: []partitionUnitJS{}}
		for _, m := range a.Members {
			mj := partitionMemberJS{ID: m.ID, Token: m.Token, Owned: m.Owned, Planned: m.Planned}
			if !m.Since.IsZero() {
				mj.Since = &m.Since
			}
			doc.Members = append(doc.Members, mj)
		}
		for _, u := range a.Units {
			doc.Units = append(doc.Units, partitionUnitJS{Name: u.Name, Planned: u.Planned, Held: u.Held, Owner: u.Owner, Token: u.Token})
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		_, err = r.stdout.Write(append(visible.JSON(data), '\n'))
		return err
	}
	now := time.Now()
	fmt.Fprintf(r.stdout, "group %s on %s: %d members, %d units\n", printable(group), where, len(a.Members), len(a.Units))
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	if len(a.Members) > 0 {
		fmt.Fprintln(tw, "MEMBER\tTOKEN\tOWNED\tPLANNED\tMEMBER FOR")
		for _, m := range a.Members {
			since := "-"
			if !m.Since.IsZero() {
				since = span(now.Sub(m.Since))
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", printable(m.ID), m.Token, m.Owned, m.Planned, since)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "UNIT\tPLANNED\tOWNER\tTOKEN")
	astray := 0
	for _, u := range a.Units {
		planned, owner, token := orDash(printable(u.Planned)), "-", "-"
		if u.Held {
			owner, token = orDash(printable(u.Owner)), fmt.Sprint(u.Token)
		}
		if !u.Held || u.Owner != u.Planned {
			astray++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable(u.Name), planned, owner, token)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if a.Settled() {
		_, err = fmt.Fprintln(r.stdout, "settled: every unit is held by the member it is planned to")
	} else {
		_, err = fmt.Fprintf(r.stdout, "not settled: %d of %d units are not held by the member they are planned to\n", astray, len(a.Units))
	}
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// partitionStatusCommand checks the flags of status --partition and
// shows the group.
func (r *runner) partitionStatusCommand(cmd *cobra.Command, prefix string, f statusFlags) error {
	fl := cmd.Flags()
	switch {
	case prefix != "":
		return usagef("--partition GROUP takes no PREFIX")
	case f.watch || fl.Changed("interval"):
		return usagef("--partition does not take --watch")
	case fl.Changed("semaphore") || fl.Changed("readers"):
		return usagef("--partition excludes --semaphore and --readers")
	}
	units, err := f.units.list(cmd, f.partition)
	if err != nil {
		return err
	}
	return r.partitionStatus(cmd.Context(), units, f)
}
