package cli

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// A frame taller or wider than the terminal is cut to fit, so that the
// screen never scrolls (which would leave the cursor-home of the next frame
// below the top of this one), and says how many rows it left out.
func TestRedrawFitsTheTerminal(t *testing.T) {
	var text strings.Builder
	text.WriteString("title\n\nKEY  TOKEN\n")
	for i := range 10 {
		fmt.Fprintf(&text, "jobs/é%02d-a-long-key-that-goes-on  %d\n", i, i+1)
	}
	for _, tc := range []struct {
		rows, cols int
		first      bool
		lines      int // drawn
	}{
		{rows: 30, cols: 120, first: true, lines: 13},
		{rows: 8, cols: 20, lines: 7},
		{rows: 0, cols: 0, lines: 13}, // size unknown: as it is
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.rows, tc.cols), func(t *testing.T) {
			out := string(redraw([]byte(text.String()), tc.rows, tc.cols, tc.first))
			start := cursorHome
			if tc.first {
				start += clearScreen
			}
			if !strings.HasPrefix(out, start) || !strings.HasSuffix(out, eraseBelow) {
				t.Fatalf("frame %q does not start with %q and end with %q", out, start, eraseBelow)
			}
			lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(out, start), eraseBelow), "\n")
			lines = lines[:len(lines)-1] // after the last newline
			if len(lines) != tc.lines {
				t.Fatalf("%d lines, want %d: %q", len(lines), tc.lines, out)
			}
			for _, l := range lines {
				l, ok := strings.CutSuffix(l, eraseLine)
				if !ok || strings.Contains(l, "\x1b") {
					t.Errorf("line %q: want its text, then the erasure of the rest of the line", l)
				}
				if n := utf8.RuneCountInString(l); tc.cols > 0 && n > tc.cols || !utf8.ValidString(l) {
					t.Errorf("line %q: %d characters, wider than %d (or cut inside one)", l, n, tc.cols)
				}
			}
			if tc.rows == 8 && !strings.HasPrefix(lines[len(lines)-1], "... and 7 more") {
				t.Errorf("last line %q; want the number of rows left out", lines[len(lines)-1])
			}
		})
	}
}
