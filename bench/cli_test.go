package bench

import (
	"context"
	"flag"
	"testing"
)

var (
	cliRuns    = flag.Int("cli", 0, "with N > 0, TestCLIRun measures `distlock run KEY -- true` against `flock FILE true`: N runs of each, interleaved")
	cliAgainst = flag.String("cli.against", "", "with -cli, also run this distlock binary (an older build, for an A/B comparison)")
)

// TestCLIRun measures the whole-process cost of `distlock run KEY -- true`
// on the default kind of backend (file://, in a temporary directory)
// against flock(1) running the same command on a lock file, the two taking
// turns run by run so that the machine's noise falls on both:
//
//	go test -run TestCLIRun -cli 200 -v .
//	go test -run TestCLIRun -cli 200 -cli.against /tmp/distlock-old -v .   # A/B against another build
//
// Three more rows split distlock's cost: `true` alone (the command), a
// full start of the distlock binary (`distlock --version`: its runtime and
// package initialization), and a start of the supervisor `distlock run`
// starts between itself and the command (`distlock __supervise` without a
// parent, which exits at once, from an early package init).
func TestCLIRun(t *testing.T) {
	if *cliRuns <= 0 {
		t.Skip("run with -cli N")
	}
	c := NewRunner(t, nil, Params{}, nil).cli(context.Background(), *cliRuns, *cliAgainst)
	if c.Skipped != "" {
		t.Skip(c.Skipped)
	}
	t.Logf("\n%s\n%d runs of each, interleaved; whole processes, from fork to exit, as a shell starts them.\n", c.table(), c.Runs)
}
