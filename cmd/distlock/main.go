package main

import (
	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	_ "github.com/distlock/distlock/cmd/distlock/internal/cli/standby/early" // the supervisor starts while distlock initialises
)

func main() { cli.Main() }
