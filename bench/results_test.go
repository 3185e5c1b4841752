package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

var (
	full   = flag.Bool("full", false, "take the full measurements (minutes) and rewrite RESULTS.md and plots/; without it, a smoke run writes to a temporary directory")
	outDir = flag.String("out", "", "write RESULTS.md, results.json and plots/ to this directory instead (default: . with -full, a temporary directory without)")
	render = flag.Bool("render", false, "measure nothing: render RESULTS.md and plots/ again from results.json in the output directory (after editing analysis.md)")
)

// fullCommand is the command that produces the committed RESULTS.md.
const fullCommand = "cd bench && go test -run TestResults -full -timeout 60m ."

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m,
		// go-redis probes a server after repeated dial failures; it notices
		// its client's Close within a second.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestResults runs every measurement on real servers: with -full, the run
// behind RESULTS.md; otherwise a smoke run of seconds that checks that each
// measurement works and that the report is complete.
func TestResults(t *testing.T) {
	p, out := SmokeParams, t.TempDir()
	if *full || *render {
		p, out = FullParams, "."
	}
	if *outDir != "" {
		out = *outDir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()

	var res *Results
	if *render {
		b, err := os.ReadFile(filepath.Join(out, "results.json"))
		if err != nil {
			t.Fatalf("-render: %v", err)
		}
		res = new(Results)
		if err := json.Unmarshal(b, res); err != nil {
			t.Fatalf("-render: results.json: %v", err)
		}
	} else {
		res = NewRunner(t, NewEnv(t), p, Subjects).Run(ctx)
		if t.Failed() {
			return
		}
		checkResults(t, p, res, Subjects)
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "results.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if err := WritePlots(filepath.Join(out, "plots"), Subjects, res); err != nil {
		t.Fatalf("plots: %v", err)
	}
	analysis, err := os.ReadFile("analysis.md")
	if err != nil {
		t.Fatalf("read analysis.md: %v", err)
	}
	rp := &Report{Command: fullCommand, Subjects: Subjects, Res: res, Analysis: string(analysis), PlotDir: "plots"}
	if !*full && !*render {
		rp.Command = "cd bench && go test ./... (smoke run)"
	}
	var buf bytes.Buffer
	if err := rp.Write(&buf); err != nil {
		t.Fatal(err)
	}
	checkReport(t, buf.String(), len(rp.Goals()))
	path := filepath.Join(out, "RESULTS.md")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, g := range rp.Goals() {
		t.Logf("goal %d: met=%v judged=%v stated=%v: %s", g.N, g.Met, g.Judged, g.Stated, g.Measured)
	}
	t.Logf("wrote %s", path)
}

// checkResults fails the test when a measurement did not do what it
// claims: every subject of subs ran, no two holders overlapped, nothing
// was lost.
func checkResults(t *testing.T, p Params, res *Results, subs []Subject) {
	t.Helper()
	semRows, semMeasured := 0, 0
	for _, s := range subs {
		if s.Has(Semaphore) {
			semRows++
			if sr := res.Semaphore[s.ID]; sr != nil && sr.NoPermits == "" {
				semMeasured++
			}
		}
	}
	if semRows > 0 && semMeasured == 0 {
		// memlock grants permits: a run with its row measures at least it.
		t.Errorf("semaphores: none of the %d rows' backends grants permits; the measurement took nothing", semRows)
	}
	if c := res.CLI; p.CLIRuns > 0 && (c == nil || c.Skipped == "" && c.ratio() == 0) {
		t.Errorf("cli: `distlock run` against flock(1) not measured")
	}
	for _, s := range subs {
		if s.Has(Latency) {
			if lr := res.Latency[s.ID]; lr == nil || len(lr.Samples) != p.Rounds*p.LatencyOps {
				t.Errorf("%s: latency samples missing", s.Name)
			} else if s.Kind != KindRoundTrip && s.Counters != nil && lr.Delta.Requests < int64(lr.Counted) {
				t.Errorf("%s: %d requests counted for %d cycles; the counters miss requests", s.Name, lr.Delta.Requests, lr.Counted)
			}
		}
		if s.Has(Throughput) {
			if tr := res.Throughput[s.ID]; tr == nil || tr.Cycles < int64(p.ThroughputWorkers*p.Rounds) {
				t.Errorf("%s: throughput: too few cycles", s.Name)
			}
		}
		if s.Has(Contention) {
			for _, n := range p.ContentionWaiters {
				cr := res.Contention[n][s.ID]
				switch {
				case cr == nil || cr.Grants < p.ContentionRounds*n*max(1, p.ContentionGrants/n):
					t.Errorf("%s, %d waiters: not every waiter had its share", s.Name, n)
				case cr.Incomplete > 0:
					t.Errorf("%s, %d waiters: %d rounds did not finish within %v", s.Name, n, cr.Incomplete, p.ContentionLimit)
				case cr.Violations > 0:
					t.Errorf("%s, %d waiters: two holders overlapped %d times", s.Name, n, cr.Violations)
				case len(cr.Errors) > 0:
					t.Errorf("%s, %d waiters: errors: %v", s.Name, n, cr.Errors)
				}
			}
		}
		if s.Has(Election) {
			er := res.Election[s.ID]
			switch {
			case er == nil || er.Terms < p.Rounds*p.ElectionTerms:
				t.Errorf("%s: elections: too few terms", s.Name)
			case er.Handoffs == 0:
				t.Errorf("%s: elections: no term passed to another candidate", s.Name)
			case er.Incomplete > 0:
				t.Errorf("%s: elections: %d rounds did not finish within %v", s.Name, er.Incomplete, p.ContentionLimit)
			case er.Violations > 0:
				t.Errorf("%s: elections: two leaders at once %d times", s.Name, er.Violations)
			case len(er.Errors) > 0:
				t.Errorf("%s: elections: errors: %v", s.Name, er.Errors)
			}
		}
		if s.Has(Semaphore) {
			checkSemaphore(t, p, s, res.Semaphore[s.ID])
		}
		if s.Has(Held) {
			hs := res.Held[s.ID]
			if len(hs) != len(p.HeldSizes) {
				t.Errorf("%s: held: %d results for %d sizes", s.Name, len(hs), len(p.HeldSizes))
			}
			for _, h := range hs {
				if h.Lost > 0 {
					t.Errorf("%s: %d of %d held locks were lost", s.Name, h.Lost, h.Locks)
				}
				if h.Renewed == 0 {
					t.Errorf("%s: no lease renewed in %v with %d locks held", s.Name, h.Window, h.Locks)
				}
			}
		}
	}
}

// checkSemaphore fails the test when the semaphore measurement of s did
// not do what it claims: a row whose backend grants permits took every
// cycle of both kinds, and its contended rounds finished with no more
// holders than the limit. A row without permits says why.
func checkSemaphore(t *testing.T, p Params, s Subject, sr *SemaphoreResult) {
	t.Helper()
	switch {
	case sr == nil:
		t.Errorf("%s: semaphores: row missing", s.Name)
		return
	case sr.NoPermits != "":
		return
	case len(sr.Lock) != p.Rounds*p.LatencyOps || len(sr.Permit) != p.Rounds*p.LatencyOps:
		t.Errorf("%s: semaphores: %d lock and %d permit cycles, want %d of each", s.Name, len(sr.Lock), len(sr.Permit), p.Rounds*p.LatencyOps)
	case s.Counters != nil && (sr.LockDelta.Requests < int64(sr.Counted) || sr.PermitDelta.Requests < int64(sr.Counted)):
		t.Errorf("%s: semaphores: %d lock and %d permit requests counted for %d cycles each; the counters miss requests",
			s.Name, sr.LockDelta.Requests, sr.PermitDelta.Requests, sr.Counted)
	}
	if p.SemaphoreWorkers == 0 {
		return
	}
	sc := sr.Contended
	switch {
	case sc == nil || sc.Grants < p.ContentionRounds*p.SemaphoreWorkers*max(1, p.ContentionGrants/p.SemaphoreWorkers):
		t.Errorf("%s: semaphores, %d workers: not every worker had its share", s.Name, p.SemaphoreWorkers)
	case sc.Incomplete > 0:
		t.Errorf("%s: semaphores, %d workers: %d rounds did not finish within %v", s.Name, p.SemaphoreWorkers, sc.Incomplete, p.ContentionLimit)
	case sc.Violations > 0:
		t.Errorf("%s: semaphores, %d workers on %d permits: %d grants made more holders than the limit (peak %d)", s.Name, sc.Workers, sc.Limit, sc.Violations, sc.Peak)
	case len(sc.Errors) > 0:
		t.Errorf("%s: semaphores, %d workers: errors: %v", s.Name, p.SemaphoreWorkers, sc.Errors)
	}
}

// checkReport fails the test when a row or a goal is missing.
func checkReport(t *testing.T, md string, goals int) {
	t.Helper()
	for _, s := range Subjects {
		if !strings.Contains(md, s.Name) {
			t.Errorf("report does not name %s", s.Name)
		}
		if s.NotBuilt != "" && !strings.Contains(md, "| "+s.Name+" | not built yet") && !strings.Contains(md, "| "+s.Service+" | "+s.Name+" | not built yet") {
			t.Errorf("report does not say that %s is not built yet", s.Name)
		}
	}
	for n := 1; n <= goals; n++ {
		if !strings.Contains(md, "\n| "+strconv.Itoa(n)+" | ") {
			t.Errorf("report lacks goal %d", n)
		}
	}
}
