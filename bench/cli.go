package bench

// The CLI measurement: the whole-process cost of `distlock run KEY -- true`
// against flock(1) running the same command.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// cliCommand measures the CLI alone, with more runs (see TestCLIRun).
const cliCommand = "cd bench && go test -run TestCLIRun -cli 200 -v ."

// CLIResult is the CLI measurement: each command's wall times, fork to
// exit, sorted. Rows[0] is flock(1), Rows[1] `distlock run`.
type CLIResult struct {
	Runs int // runs of each command, interleaved
	Rows []CLIRow
	// Skipped, when not empty, says why nothing was measured.
	Skipped string
}

// CLIRow is one command's times.
type CLIRow struct {
	Name    string
	Samples []time.Duration
}

// cliRow is one command the CLI measurement times.
type cliRow struct {
	name string
	argv []string
	exit int // the exit code the row expects
}

// cli builds the distlock command (in its own module, with its own
// dependencies, as users build it) and times `distlock run KEY -- true` on
// the default kind of backend (file://, in a temporary directory) against
// `flock FILE true`, with three rows that split distlock's cost: `true`
// alone, a full start of the binary (`distlock --version`: runtime and
// package initialization, which `distlock run` pays once), and a start of
// the supervisor that `distlock run` starts between itself and the
// command (`distlock __supervise` without a parent, which exits at once:
// the supervisor runs from an early package init, before the heavy ones).
// The rows take turns run by run, runs
// times each. against, when set, is another distlock binary (an older
// build) timed beside it. A machine without flock(1) skips the measurement.
func (r *Runner) cli(ctx context.Context, runs int, against string) *CLIResult {
	r.tb.Helper()
	flock, err := exec.LookPath("flock")
	if err != nil {
		return &CLIResult{Skipped: fmt.Sprintf("flock(1) not found: %v", err)}
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		r.tb.Fatalf("cli: %v", err)
	}
	dir, err := os.MkdirTemp("", "bench-cli-")
	if err != nil {
		r.tb.Fatalf("cli: %v", err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "distlock")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = "../cmd/distlock"
	if out, err := build.CombinedOutput(); err != nil {
		r.tb.Fatalf("cli: go build: %v\n%s", err, out)
	}
	env := append(os.Environ(), "DISTLOCK_BACKEND=file://"+filepath.Join(dir, "locks"))
	rows := []cliRow{
		{"flock(1) FILE true", []string{flock, filepath.Join(dir, "flock.lock"), truePath}, 0},
		{"distlock run KEY -- true", []string{bin, "run", "bench/cli", "--", truePath}, 0},
		{"true alone", []string{truePath}, 0},
		{"distlock --version (runtime and package init)", []string{bin, "--version"}, 0},
		{"supervisor start alone (early init)", []string{bin, "__supervise"}, 64},
	}
	if against != "" {
		rows = append(rows,
			cliRow{"distlock run KEY -- true, with " + against, []string{against, "run", "bench/cli", "--", truePath}, 0},
			cliRow{"distlock --version, with " + against, []string{against, "--version"}, 0},
			cliRow{"supervisor start alone, with " + against, []string{against, "__supervise"}, 64})
	}
	runOnce := func(row cliRow) time.Duration {
		cmd := exec.CommandContext(ctx, row.argv[0], row.argv[1:]...)
		cmd.Env = env
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		var ee *exec.ExitError
		if !(err == nil && row.exit == 0) && !(errors.As(err, &ee) && ee.ExitCode() == row.exit) {
			r.tb.Fatalf("cli: %s: %v", strings.Join(row.argv, " "), err)
		}
		return d
	}
	for _, row := range rows { // warm the page cache
		runOnce(row)
	}
	res := &CLIResult{Runs: runs, Rows: make([]CLIRow, len(rows))}
	for i, row := range rows {
		res.Rows[i].Name = row.name
	}
	for i := range runs {
		for k := range rows {
			j := (k + i) % len(rows)
			res.Rows[j].Samples = append(res.Rows[j].Samples, runOnce(rows[j]))
		}
	}
	for _, row := range res.Rows {
		slices.Sort(row.Samples)
	}
	r.logf("cli: %d runs of each command done", runs)
	return res
}

// ratio is distlock run's p50 over flock(1)'s, 0 when not measured.
func (c *CLIResult) ratio() float64 {
	if c == nil || len(c.Rows) < 2 || len(c.Rows[0].Samples) == 0 || len(c.Rows[1].Samples) == 0 {
		return 0
	}
	return float64(quantile(c.Rows[1].Samples, 0.5)) / float64(quantile(c.Rows[0].Samples, 0.5))
}

// table renders the measurement as a Markdown table.
func (c *CLIResult) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| command | p50 | p90 | mean | p50 / flock(1) |\n|---|---|---|---|---|\n")
	base := quantile(c.Rows[0].Samples, 0.5)
	for _, row := range c.Rows {
		p50 := quantile(row.Samples, 0.5)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f |\n", row.Name, fmtDur(p50), fmtDur(quantile(row.Samples, 0.9)), fmtDur(mean(row.Samples)), float64(p50)/float64(base))
	}
	return b.String()
}

func (rp *Report) writeCLI(pf func(string, ...any), section int) {
	pf("## %d. `distlock run` against flock(1)\n\n", section)
	c := rp.Res.CLI
	switch {
	case c == nil:
		pf("Not measured in this run (its results predate the measurement): `%s` measures it alone.\n\n", cliCommand)
		return
	case c.Skipped != "":
		pf("Not measured: %s.\n\n", c.Skipped)
		return
	}
	pf("Whole processes, from fork to exit, as a shell starts them, %d runs of each command, the commands taking turns run by run: `distlock run KEY -- true` over the default kind of backend (file://, in a temporary directory; the binary built from cmd/distlock as users build it) against `flock FILE true`. `true` alone is the command's own cost; the other rows split distlock's: a start of the binary (its runtime and package initialization), and, where measured, a start of the supervisor that `distlock run` starts between itself and the command. `%s` takes more runs.\n\n",
		c.Runs, cliCommand)
	pf("%s\n", c.table())
}
