package torture_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/torture"
)

var (
	full   = flag.Bool("torture.full", false, "run every scenario for many rounds and write REPORT.md and report/")
	rounds = flag.Int("torture.rounds", 0, "fault rounds per run (default: 1, or 5 with -torture.full)")
)

func TestMain(m *testing.M) {
	torture.RunWorkerIfRequested()
	goleak.VerifyTestMain(m)
}

// params are the sizes of the short run (CI) and of the full run.
func params() torture.Params {
	p := torture.Params{Rounds: 1, Warm: 2, TTL: time.Second}
	if *full {
		p = torture.Params{Rounds: 5, Warm: 1, TTL: time.Second, Full: true}
	}
	if *rounds > 0 {
		p.Rounds = *rounds
	}
	return p
}

var (
	resultsMu sync.Mutex
	results   []*torture.Result
)

// TestTorture runs every scenario on every backend it applies to, once
// with an unfenced store (the baseline) and once with a fenced one.
func TestTorture(t *testing.T) {
	p := params()
	visDir := ""
	if *full {
		// The pages of the rows that do not run (a run of some rows)
		// are kept: the kept rows' timelines link them. Each row's own
		// page is removed before it runs (see below).
		visDir = filepath.Join("report", "histories")
		if err := os.MkdirAll(visDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []string{"redis", "redlock", "etcd", "file", "zookeeper", "postgres", "gateway"} {
		t.Run(kind, func(t *testing.T) {
			target := startTarget(t, kind)
			for _, sc := range torture.Scenarios {
				if _, ok := sc.Expect[kind]; !ok {
					continue
				}
				t.Run(sc.ID(), func(t *testing.T) {
					for _, mode := range torture.Modes(kind) {
						t.Run(mode.String(), func(t *testing.T) {
							vis := ""
							if visDir != "" {
								vis = filepath.Join(visDir, strings.ReplaceAll(kind+"-"+sc.ID()+"-"+mode.String(), "/", "-")+".html")
								// A run that writes no page must not leave
								// an earlier run's in its place.
								if err := os.Remove(vis); err != nil && !os.IsNotExist(err) {
									t.Fatal(err)
								}
							}
							res := torture.RunScenario(t, sc, target, mode, p, vis)
							judge(t, sc, res)
							resultsMu.Lock()
							results = append(results, res)
							resultsMu.Unlock()
						})
					}
				})
			}
		})
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	t.Logf("\n%s", torture.Table(results))
	if *full && !t.Failed() {
		if err := torture.WriteReport(".", results, p); err != nil {
			t.Fatal(err)
		}
	}
}

func startTarget(t *testing.T, kind string) torture.Target {
	switch kind {
	case "redis":
		return torture.Target{Kind: kind, Redis: testserver.StartRedis(t)}
	case "etcd":
		return torture.Target{Kind: kind, Etcd: testserver.StartEtcd(t)}
	case "zookeeper":
		return torture.Target{Kind: kind, ZK: testserver.StartZooKeeper(t)}
	case "postgres":
		pg := testserver.StartPostgres(t)
		return torture.Target{Kind: kind, PG: pg, Data: pg}
	case "gateway":
		return torture.GatewayTarget(torture.StartGateway(t))
	case "redlock":
		return torture.RedlockTarget(t)
	}
	return torture.Target{Kind: kind, Dir: t.TempDir()}
}

// judge asserts what a row must show.
func judge(t *testing.T, sc torture.Scenario, res *torture.Result) {
	t.Helper()
	t.Logf("%s: %d grants, %d writes, verdicts %v; %s", res.Mode, res.Grants, res.Writes, res.Verdicts, res.Outcome())
	for _, n := range res.Notes {
		t.Log("  " + n)
	}
	if res.Mode != torture.Unfenced && res.StaleAccepted > 0 {
		t.Errorf("the fenced store accepted %d stale writes", res.StaleAccepted)
	}
	if res.Verdicts["register"] == porcupine.Illegal && res.Mode != torture.Unfenced {
		t.Errorf("the fenced register's history is not linearizable")
	}
	// The term's promises, in every mode: an old leader's term had ended
	// before its late write, and the observer reported leaders in order.
	if res.UnendedLateWrites > 0 {
		t.Errorf("%d late writes by a paused leader whose term's deadline came after another's election", res.UnendedLateWrites)
	}
	// A read lock's promise, in every mode: a paused reader's lock had
	// ended before the writer's grant; and a validating reader uses no
	// read of a write made under a token above its own.
	if res.UnendedReads > 0 {
		t.Errorf("%d late reads by a paused reader whose read lock's deadline came after the writer's grant", res.UnendedReads)
	}
	if res.Mode != torture.Unfenced && res.StaleReads > 0 {
		t.Errorf("%d stale reads used by a reader that validated them against the fence", res.StaleReads)
	}
	if res.ObserveViolations > 0 {
		t.Errorf("%d observer errors: see the notes", res.ObserveViolations)
	}
	if !sc.BreaksTokens && res.TokenRegressions > 0 {
		t.Errorf("%d token regressions: the backend promises increasing tokens here", res.TokenRegressions)
	}
	if !sc.BreaksTokens && res.Verdicts["tokens"] == porcupine.Illegal {
		t.Errorf("the token model is illegal: the backend promises increasing tokens here")
	}
	switch res.Expect {
	case torture.ExpectBite:
		if res.Effective == 0 {
			t.Errorf("the fault never took effect in %d rounds", res.Rounds)
		}
		if res.Mode == torture.Unfenced && !res.Bit() {
			t.Errorf("fault did not bite: the baseline shows no violation")
		}
	case torture.ExpectHold:
		if res.Effective == 0 {
			t.Errorf("the fault never took effect in %d rounds: the guard was not exercised", res.Rounds)
		}
		if res.Bit() {
			t.Errorf("violation: %s", res.Outcome())
		}
	case torture.ExpectNothing:
		if res.Overlaps > 0 || res.Verdicts["mutex"] == porcupine.Illegal {
			t.Errorf("overlapping holds on a backend where the fault does not apply: %s", res.Outcome())
		}
	}
}
