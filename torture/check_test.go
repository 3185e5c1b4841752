package torture

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The counts on a hand-made run: a stale write, a lost update, a proven
// overlap and a repeated token are each counted once; a hold whose
// liveness was not proven past the next grant is not an overlap.
func TestCheckCounts(t *testing.T) {
	for _, mode := range []Mode{Unfenced, Fenced} {
		t.Run(mode.String(), func(t *testing.T) {
			r := NewRun(t, mode)
			c := &storeClient{addr: r.Store.Addr(), worker: "A"}
			defer c.close()
			write := func(worker string, token uint64, value int64) {
				t.Helper()
				c.close()
				c.worker = worker
				seq, stale, err := c.write("r", token, value, time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if !stale {
					r.Hist.Update(seq, func(o *Op) { o.Acked = true })
				}
			}
			grant := func(worker string, token uint64, call, ret, live, end int64) {
				r.mu.Lock()
				defer r.mu.Unlock()
				g := &grantRec{id: len(r.grants) + 1, worker: worker, key: "k", token: token, acqCall: call, acqReturn: ret, live: live, endAt: end}
				r.grants = append(r.grants, g)
				r.Hist.Add(Op{Worker: worker, Kind: KindAcquire, Key: "k", Grant: g.id, Token: token, Call: call, Return: ret, Outcome: OutcomeOK})
			}
			// A holds token 5 and is last proven live at 20, before B's
			// grant: not an overlap.
			grant("A", 5, 0, 10, 20, 30)
			grant("B", 6, 15, 100, 200, 210)
			// C is granted token 6 again while B is proven live: an
			// overlap and a repeated token.
			grant("C", 6, 150, 160, 190, 220)
			write("A", 5, 1)
			write("B", 6, 2)
			write("A", 5, 2) // stale: B wrote with 6
			res := r.Check(&Result{Mode: mode}, "")
			if res.Overlaps != 1 {
				t.Errorf("overlaps %d, want 1", res.Overlaps)
			}
			if res.TokenRegressions != 1 {
				t.Errorf("token regressions %d, want 1", res.TokenRegressions)
			}
			if res.StaleAttempted != 1 {
				t.Errorf("stale attempted %d, want 1", res.StaleAttempted)
			}
			wantAccepted, wantLost := 1, 1 // unfenced: A's stale write overwrote B's increment
			if mode == Fenced {
				wantAccepted, wantLost = 0, 0
			}
			if res.StaleAccepted != wantAccepted || res.StaleRefused != 1-wantAccepted {
				t.Errorf("stale accepted/refused %d/%d, want %d/%d", res.StaleAccepted, res.StaleRefused, wantAccepted, 1-wantAccepted)
			}
			if res.LostUpdates != wantLost {
				t.Errorf("lost updates %d, want %d", res.LostUpdates, wantLost)
			}
			if res.Verdicts["mutex"] != "Illegal" || res.Verdicts["tokens"] != "Illegal" {
				t.Errorf("verdicts %v: want mutex and tokens Illegal", res.Verdicts)
			}
			if !res.Bit() {
				t.Error("Bit() is false")
			}
		})
	}
}

// A visualization page keeps its data and loads the shared viewer, which
// holds porcupine's script (its render function) and style.
func TestSplitVisualization(t *testing.T) {
	model := porcupine.Model{
		Init:  func() any { return 0 },
		Step:  func(state, input, output any) (bool, any) { return true, state },
		Equal: func(a, b any) bool { return a == b },
	}
	_, info := porcupine.CheckOperationsVerbose(model, []porcupine.Operation{{ClientId: 0, Input: 1, Call: 0, Output: 1, Return: 1}}, 0)
	var page strings.Builder
	if err := porcupine.Visualize(model, info, &page); err != nil {
		t.Fatal(err)
	}
	style, script, slim, err := splitVisualization(page.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "function render") || !strings.Contains(style, "{") {
		t.Errorf("the shared viewer lacks porcupine's render function or style")
	}
	for _, want := range []string{`src="` + vizScript + `"`, `href="` + vizStyle + `"`, "const data = ", "render(data)", `id="canvas"`} {
		if !strings.Contains(slim, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if len(slim) > len(page.String())/4 {
		t.Errorf("the page is %d bytes of porcupine's %d", len(slim), len(page.String()))
	}
	if _, _, _, err := splitVisualization("<html>no viewer</html>"); err == nil {
		t.Error("a page of another shape was split")
	}
}

// Read locks: two proven live together are no overlap, and the mutex
// model does not see them; a read lock proven live with a write lock is
// an overlap; every grant is in the token model.
func TestCheckShared(t *testing.T) {
	r := NewRun(t, Unfenced)
	grant := func(worker string, token uint64, shared bool, call, ret, live, end int64) {
		r.mu.Lock()
		defer r.mu.Unlock()
		g := &grantRec{id: len(r.grants) + 1, worker: worker, key: "k", token: token, acqCall: call, acqReturn: ret, live: live, endAt: end, shared: shared}
		r.grants = append(r.grants, g)
		r.Hist.Add(Op{Worker: worker, Kind: KindAcquire, Key: "k", Grant: g.id, Token: token, Call: call, Return: ret, Outcome: OutcomeOK, Shared: shared})
	}
	grant("R1", 1, true, 0, 10, 50, 60)
	grant("R2", 2, true, 5, 12, 55, 65)
	grant("W", 3, false, 1, 70, 80, 90)
	res := r.Check(&Result{Mode: Unfenced}, "")
	if res.Overlaps != 0 || res.Verdicts["mutex"] != porcupine.Ok || res.Verdicts["tokens"] != porcupine.Ok {
		t.Fatalf("readers sharing: overlaps %d, verdicts %v; want none, Ok", res.Overlaps, res.Verdicts)
	}

	r = NewRun(t, Unfenced)
	grant("R1", 1, true, 0, 10, 50, 60)
	grant("W", 2, false, 5, 20, 40, 70) // proven live with R1 from 20 to 40
	res = r.Check(&Result{Mode: Unfenced}, "")
	if res.Overlaps != 1 || !res.Bit() {
		t.Fatalf("a writer within a read lock: overlaps %d, want 1", res.Overlaps)
	}
}

// The store answers H with the highest token admitted for a resource,
// in either mode, and records nothing for it.
func TestStoreHighest(t *testing.T) {
	for _, mode := range []Mode{Unfenced, Fenced} {
		t.Run(mode.String(), func(t *testing.T) {
			r := NewRun(t, mode)
			c := &storeClient{addr: r.Store.Addr(), worker: "A"}
			defer c.close()
			for _, tok := range []uint64{3, 7, 5} {
				if _, _, err := c.write("r", tok, int64(tok), time.Second); err != nil {
					t.Fatal(err)
				}
			}
			n := len(r.Hist.Ops())
			h, err := c.highest("r", time.Second)
			if err != nil || h != 7 {
				t.Fatalf("highest %d, %v; want 7", h, err)
			}
			if h, err := c.highest("other", time.Second); err != nil || h != 0 {
				t.Fatalf("highest of an unwritten resource %d, %v; want 0", h, err)
			}
			if len(r.Hist.Ops()) != n {
				t.Errorf("H was recorded in the history")
			}
		})
	}
}
