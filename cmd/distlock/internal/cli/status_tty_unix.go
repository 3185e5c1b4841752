//go:build unix

package cli

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	_, _, ok := terminalSize(w)
	return ok
}

// terminalSize returns the size of the terminal w, in rows and columns
// (0 when the terminal does not know it); ok is false when w is not a
// terminal.
func terminalSize(w io.Writer) (rows, cols int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return 0, 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, false
	}
	return int(ws.Row), int(ws.Col), true
}
