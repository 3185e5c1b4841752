//go:build !unix

package cli

import "io"

// isTerminal reports whether w is a terminal: never known here, so that
// status --watch prints plain listings.
func isTerminal(io.Writer) bool { return false }

func terminalSize(io.Writer) (rows, cols int, ok bool) { return 0, 0, false }
