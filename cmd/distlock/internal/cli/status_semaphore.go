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
	"text/tabwriter"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/visible"
	"github.com/distlock/distlock/semaphore"
)

// semaphoreJSON is the document of `distlock status --semaphore NAME --json`.
type semaphoreJSON struct {
	Name    string       `json:"name"`
	Key     string       `json:"key"`
	Limit   *int         `json:"limit,omitempty"` // absent: the layout stores none
	Waiting int          `json:"waiting"`
	Holders []holderJSON `json:"holders"`
}

// semaphoreStatus shows the semaphore f.semaphore: its limit, its waiters
// and its live permits.
func (r *runner) semaphoreStatus(ctx context.Context, f statusFlags) error {
	name := f.semaphore
	key := semaphore.KeyPrefix + name
	if name == "" {
		return usagef("--semaphore needs a NAME")
	}
	if err := distlock.ValidateKey(key); err != nil {
		return fmt.Errorf("semaphore %q: %w", name, err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, closer, err := openToList(ctx, r.backendURL, r.openers)
	if err != nil {
		return err
	}
	defer closer.Close()
	where := describeBackend(b, r.backendURL)
	var st driver.PermitState
	switch s := b.(type) {
	case emptyDir: // no lock directory: no permit
	case driver.Semaphores:
		if st, err = s.Permits(ctx, key); err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				return usagef("backend %s cannot grant permits: %v", where, err)
			}
			return err
		}
	default:
		return usagef("backend %s cannot grant permits", where)
	}
	now := time.Now()
	if f.json {
		doc := semaphoreJSON{Name: name, Key: key, Waiting: st.Waiting, Holders: holdersJSON(st.Holders, now)}
		if st.Limit != driver.UnknownLimit {
			doc.Limit = &st.Limit
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		_, err = r.stdout.Write(append(visible.JSON(data), '\n'))
		return err
	}
	limit := "no stored limit"
	switch {
	case st.Limit == driver.UnknownLimit:
		limit = "limit not stored by this service"
	case st.Limit > 0:
		limit = "limit " + strconv.Itoa(st.Limit)
	}
	fmt.Fprintf(r.stdout, "semaphore %s on %s: %s, %d held, %d waiting\n", printable(name), where, limit, len(st.Holders), st.Waiting)
	if len(st.Holders) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tTOKEN\tOWNER\tHELD FOR\tTIME LEFT")
	for _, h := range st.Holders {
		slot := "-"
		if h.HasSlot {
			slot = strconv.Itoa(h.Slot)
		}
		owner, held, left := columns(h, now)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", slot, h.Token, owner, held, left)
	}
	return tw.Flush()
}
