// Command distlock runs commands under distributed locks. See
// `distlock --help` and the documentation of internal/cli.
package main

import "github.com/distlock/distlock/internal/cli"

func main() { cli.Main() }
