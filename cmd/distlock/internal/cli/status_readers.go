package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/visible"
)

// readersJSON is the document of `distlock status --readers KEY --json`.
type readersJSON struct {
	Key     string       `json:"key"`
	Holder  *holderJSON  `json:"holder"` // null: not held exclusively
	Readers []holderJSON `json:"readers"`
}

// readersStatus shows the lock f.readers alone: its exclusive holder
// (Client.Holder) and its shared locks (Client.Readers).
func (r *runner) readersStatus(ctx context.Context, f statusFlags) error {
	key := f.readers
	if key == "" {
		return usagef("--readers needs a KEY")
	}
	if err := distlock.ValidateKey(key); err != nil {
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
	r.log.Debug("reading holders", "backend", where, "key", key)
	var (
		holder driver.Holder
		held   bool
		rs     []driver.Holder
	)
	if _, missing := b.(emptyDir); !missing { // no lock directory: no holder
		c, err := distlock.New(b)
		if err != nil {
			return err
		}
		defer c.Close(context.WithoutCancel(ctx))
		if rs, err = c.Readers(ctx, key); err != nil {
			if errors.Is(err, errors.ErrUnsupported) {
				return usagef("backend %s cannot grant shared locks: %v", where, err)
			}
			return err
		}
		if holder, held, err = c.Holder(ctx, key); err != nil {
			return err
		}
	}
	now := time.Now()
	if f.json {
		doc := readersJSON{Key: key, Readers: holdersJSON(rs, now)}
		if held {
			doc.Holder = &holdersJSON([]driver.Holder{holder}, now)[0]
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		_, err = r.stdout.Write(append(visible.JSON(data), '\n'))
		return err
	}
	state := "not held exclusively"
	if held {
		state = "held exclusively"
	}
	fmt.Fprintf(r.stdout, "lock %s on %s: %s, %d shared\n", printable(key), where, state, len(rs))
	hs := rs
	if held {
		hs = append([]driver.Holder{holder}, rs...)
	}
	if len(hs) == 0 {
		return nil
	}
	return writeTable(r.stdout, hs, now)
}
