// Package early runs the supervisor of `distlock run`, or starts it, from
// its init, before the packages of the lock services' clients initialise
// (see packages standby and supervisor). Only the distlock command imports
// it: other programs that link the CLI, its tests among them, mean other
// things by their arguments.
package early

import (
	"os"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
	"github.com/distlock/distlock/cmd/distlock/internal/cli/supervisor"
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == standby.Command {
		// The supervisor needs none of the packages that initialise after
		// this one: it runs and exits here.
		os.Exit(supervisor.Main(os.Args[2:]))
	}
	standby.StartAtInit(os.Args[1:])
}
