package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
// More rows split distlock's cost: `true` alone (the command); a start of
// the distlock binary (`distlock --version`: its runtime and package
// initialization, and the command line's parsing), which `distlock run`
// pays once; and a start of its supervisor, which `distlock run` starts
// between itself and the command (`distlock __supervise` without a
// parent, which exits at once: the supervisor runs from an early init,
// before most packages initialise).
func TestCLIRun(t *testing.T) {
	if *cliRuns <= 0 {
		t.Skip("run with -cli N")
	}
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skipf("flock(1) not found: %v", err)
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "distlock")
	// Built in its own module, with its own dependencies, as users build it.
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../cmd/distlock"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	env := append(os.Environ(), "DISTLOCK_BACKEND=file://"+filepath.Join(dir, "locks"))
	rows := []cliRow{
		{"flock(1) FILE true", []string{flock, filepath.Join(dir, "flock.lock"), truePath}, 0},
		{"distlock run KEY -- true", []string{bin, "run", "bench/cli", "--", truePath}, 0},
		{"true alone", []string{truePath}, 0},
		{"distlock --version (runtime and package init)", []string{bin, "--version"}, 0},
		{"supervisor start alone (early init)", []string{bin, "__supervise"}, 64},
	}
	if *cliAgainst != "" {
		rows = append(rows,
			cliRow{"distlock run KEY -- true, with " + *cliAgainst, []string{*cliAgainst, "run", "bench/cli", "--", truePath}, 0},
			cliRow{"distlock --version, with " + *cliAgainst, []string{*cliAgainst, "--version"}, 0},
			cliRow{"supervisor start alone, with " + *cliAgainst, []string{*cliAgainst, "__supervise"}, 64})
	}
	ctx := context.Background()
	runOnce := func(argv []string, exit int) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = env
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		var ee *exec.ExitError
		switch {
		case err == nil && exit == 0:
			return d, nil
		case errors.As(err, &ee) && ee.ExitCode() == exit:
			return d, nil
		}
		return d, fmt.Errorf("%s: %v", strings.Join(argv, " "), err)
	}
	for _, r := range rows { // warm the page cache
		if _, err := runOnce(r.argv, r.exit); err != nil {
			t.Fatal(err)
		}
	}
	samples := make([][]time.Duration, len(rows))
	for i := range *cliRuns {
		for k := range rows {
			j := (k + i) % len(rows)
			d, err := runOnce(rows[j].argv, rows[j].exit)
			if err != nil {
				t.Fatal(err)
			}
			samples[j] = append(samples[j], d)
		}
	}
	for _, s := range samples {
		slices.Sort(s)
	}
	base := quantile(samples[0], 0.5)
	var b strings.Builder
	fmt.Fprintf(&b, "\n| command | p50 | p90 | mean | p50 / flock(1) |\n|---|---|---|---|---|\n")
	for i, r := range rows {
		p50 := quantile(samples[i], 0.5)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f |\n", r.name, fmtDur(p50), fmtDur(quantile(samples[i], 0.9)), fmtDur(mean(samples[i])), float64(p50)/float64(base))
	}
	fmt.Fprintf(&b, "\n%d runs of each, interleaved; whole processes, from fork to exit, as a shell starts them.\n", *cliRuns)
	t.Log(b.String())
}

// cliRow is one command TestCLIRun times.
type cliRow struct {
	name string
	argv []string
	exit int // the exit code the row expects
}
