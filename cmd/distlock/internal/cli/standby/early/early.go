// Package early starts the supervisor of `distlock run` from its init,
// before the packages of the lock services' clients initialise (see
// package standby). Only the distlock command imports it: other programs
// that link the CLI, its tests among them, mean other things by their
// arguments.
package early

import (
	"os"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
)

func init() { standby.StartAtInit(os.Args[1:]) }
