package main

import "github.com/distlock/distlock/internal/cli"

func main() { cli.Main() }
