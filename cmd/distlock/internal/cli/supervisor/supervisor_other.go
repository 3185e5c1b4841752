//go:build !unix

package supervisor

import (
	"fmt"
	"os"
	"runtime"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
)

// Main refuses to supervise: distlock run needs the process groups and
// signals of Unix systems.
func Main([]string) int {
	fmt.Fprintf(os.Stderr, "distlock: %s is not supported on %s\n", standby.Command, runtime.GOOS)
	return ExitUsage
}
