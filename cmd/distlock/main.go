// Command distlock runs commands under distributed locks. See
// `distlock --help` and the documentation of internal/cli.
package main

import (
	"context"
	"os"

	"github.com/distlock/distlock/internal/cli"
)

func main() { os.Exit(cli.Run(context.Background(), os.Args[1:])) }
