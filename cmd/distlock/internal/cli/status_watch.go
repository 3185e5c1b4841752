package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/visible"
)

// Terminal sequences (ANSI) of the watch's redraw. The screen is cleared
// once; later frames overwrite the last one line by line, each line's
// rest erased, and then the screen below it, so that it does not flicker.
const (
	cursorHome  = "\x1b[H"
	clearScreen = "\x1b[2J"
	eraseLine   = "\x1b[K"
	eraseBelow  = "\x1b[J"
)

// watch lists the holders under prefix every f.interval until ctx ends,
// which is the normal end of a watch (Ctrl-C): it then returns nil.
func (r *runner) watch(ctx context.Context, lister driver.Lister, where, prefix string, f statusFlags) error {
	tty := !f.json && r.getenv("TERM") != "dumb" && isTerminal(r.stdout)
	title := "distlock status"
	if prefix != "" {
		title += " " + printable(prefix)
	}
	title += " on " + printable(where) + ", every " + f.interval.String()
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	var frame bytes.Buffer
	for n := 0; ; n++ {
		hs, unread, err := listHolders(ctx, lister, prefix, where)
		if ctx.Err() != nil {
			return nil
		}
		if !tty || f.json || (err != nil && n == 0) {
			for _, u := range unread {
				fmt.Fprintf(r.stderr, "distlock: %s\n", printable(u))
			}
			unread = nil
		}
		if err != nil && n == 0 {
			return err // a service that cannot be listed at all fails as without --watch
		}
		now := time.Now()
		frame.Reset()
		switch {
		case err != nil && (f.json || !tty):
			fmt.Fprintln(r.stderr, retrying(err, f.interval))
		case f.json:
			// One line per listing, so that line-oriented tools can follow.
			data, err := json.Marshal(holdersJSON(hs, now))
			if err != nil {
				return err
			}
			frame.Write(visible.JSON(data))
			frame.WriteByte('\n')
		default:
			fmt.Fprintf(&frame, "%s: %s\n\n", title, now.Format(time.DateTime))
			switch {
			case err != nil:
				fmt.Fprintln(&frame, printable(retrying(err, f.interval)))
			case len(hs) == 0 && prefix != "":
				fmt.Fprintf(&frame, "no lock held under %q\n", prefix)
			case len(hs) == 0:
				frame.WriteString("no lock held\n")
			default:
				writeTable(&frame, hs, now)
			}
			for _, u := range unread { // only on a terminal: off it, said on stderr
				fmt.Fprintln(&frame, printable(u))
			}
			if tty {
				rows, cols, _ := terminalSize(r.stdout)
				b := redraw(frame.Bytes(), rows, cols, n == 0)
				frame.Reset()
				frame.Write(b)
			} else {
				frame.WriteByte('\n')
			}
		}
		// One write per frame: a terminal shows it whole.
		if _, err := r.stdout.Write(frame.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watchLister lists for a watch. A file:// lock directory that does not
// exist (which status does not create) is looked for again at each
// listing, so that the watch shows the first lock taken there.
type watchLister struct {
	r      *runner
	lister driver.Lister
	opened io.Closer // of the backend opened here, if any
}

func (w *watchLister) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if _, missing := w.lister.(emptyDir); missing {
		b, closer, err := openToList(ctx, w.r.backendURL, w.r.openers)
		if err != nil {
			return nil, err
		}
		l, ok := b.(driver.Lister)
		if !ok {
			closer.Close()
			return nil, usagef("backend %s cannot list lock holders", redact(w.r.backendOrDefault()))
		}
		w.lister, w.opened = l, closer
	}
	return w.lister.List(ctx, prefix)
}

// Close closes the backend opened by List.
func (w *watchLister) Close() error {
	if w.opened != nil {
		return w.opened.Close()
	}
	return nil
}

// retrying says that a listing failed with err and when the next is.
func retrying(err error, interval time.Duration) string {
	return fmt.Sprintf("distlock: %s; trying again in %v", strings.TrimPrefix(err.Error(), "distlock: "), interval)
}

// redraw returns the terminal bytes that draw text, a frame of lines, in
// place of the last one on a screen of rows by cols (0: unknown), the
// screen cleared first if first. Lines are cut to the width, and the table
// to the height, with the number of rows left out said on its last line,
// so that the screen never scrolls and the next frame's cursor-home
// overwrites this one.
func redraw(text []byte, rows, cols int, first bool) []byte {
	lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	if rows > 1 && len(lines) > rows-1 {
		// The last row stays empty: a newline there would scroll.
		keep := max(rows-2, 0)
		more := len(lines) - keep
		lines = append(lines[:keep:keep], fmt.Sprintf("... and %d more (a taller terminal, or a PREFIX, shows them)", more))
	}
	var b bytes.Buffer
	b.WriteString(cursorHome)
	if first {
		b.WriteString(clearScreen)
	}
	for _, l := range lines {
		b.WriteString(cut(l, cols))
		b.WriteString(eraseLine)
		b.WriteByte('\n')
	}
	b.WriteString(eraseBelow)
	return b.Bytes()
}

// cut returns s cut to at most cols runes (no limit for 0), so that a long
// line does not wrap onto the next row.
func cut(s string, cols int) string {
	if cols <= 0 || utf8.RuneCountInString(s) <= cols {
		return s
	}
	i, n := 0, 0
	for i = range s {
		if n == cols {
			break
		}
		n++
	}
	return s[:i]
}
