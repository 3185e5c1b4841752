package torture

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The models must tell a legal history from an illegal one; each case is a
// hand-made history with its expected verdict.
func TestModels(t *testing.T) {
	acq := func(w string, g int, tok uint64, call, ret int64) Op {
		return Op{Worker: w, Kind: KindAcquire, Key: "k", Grant: g, Token: tok, Call: call, Return: ret, Outcome: OutcomeOK}
	}
	end := func(w string, g int, call, ret int64) Op {
		return Op{Worker: w, Kind: KindEnd, Key: "k", Grant: g, Call: call, Return: ret, Outcome: OutcomeOK}
	}
	write := func(w string, tok uint64, v int64, admitted bool, call, ret int64) Op {
		o := Op{Worker: w, Kind: KindWrite, Key: "r", Token: tok, Value: v, Call: call, Return: ret, Outcome: OutcomeOK}
		if !admitted {
			o.Outcome = OutcomeStale
		}
		return o
	}
	read := func(w string, v int64, call, ret int64) Op {
		return Op{Worker: w, Kind: KindRead, Key: "r", Value: v, Call: call, Return: ret, Outcome: OutcomeOK}
	}
	cases := []struct {
		name  string
		model modelKind
		ops   []Op
		want  porcupine.CheckResult
	}{
		{"mutex: holds one after the other", modelMutex, []Op{
			acq("A", 1, 1, 0, 10), end("A", 1, 20, 30), acq("B", 2, 2, 25, 40), end("B", 2, 50, 60)}, porcupine.Ok},
		{"mutex: B granted while A proven live", modelMutex, []Op{
			acq("A", 1, 1, 0, 10), acq("B", 2, 2, 20, 30), end("A", 1, 40, 50), end("B", 2, 60, 70)}, porcupine.Illegal},
		{"mutex: A's end may come before B's grant", modelMutex, []Op{
			acq("A", 1, 1, 0, 10), acq("B", 2, 2, 20, 30), end("A", 1, 15, 50), end("B", 2, 60, 70)}, porcupine.Ok},
		{"mutex: one worker's grants do not stand for each other", modelMutex, []Op{
			acq("A", 1, 1, 0, 10), acq("B", 2, 2, 20, 30), end("A", 3, 25, 35), acq("A", 3, 3, 21, 24), end("A", 1, 40, 50)}, porcupine.Illegal},
		{"tokens: increasing", modelTokens, []Op{
			acq("A", 1, 1, 0, 10), acq("B", 2, 2, 20, 30), acq("A", 3, 5, 40, 50)}, porcupine.Ok},
		{"tokens: regression", modelTokens, []Op{
			acq("A", 1, 3, 0, 10), acq("B", 2, 2, 20, 30)}, porcupine.Illegal},
		{"tokens: repeated", modelTokens, []Op{
			acq("A", 1, 3, 0, 10), acq("B", 2, 3, 20, 30)}, porcupine.Illegal},
		{"tokens: concurrent grants may be ordered either way", modelTokens, []Op{
			acq("A", 1, 3, 0, 30), acq("B", 2, 2, 10, 20)}, porcupine.Ok},
		{"register: fenced history", modelRegister, []Op{
			write("A", 33, 1, true, 0, 1), write("A", 33, 2, true, 2, 3), write("B", 34, 3, true, 4, 5),
			write("A", 33, 3, false, 6, 7), read("B", 3, 8, 9)}, porcupine.Ok},
		{"register: stale write admitted", modelRegister, []Op{
			write("B", 34, 3, true, 4, 5), write("A", 33, 2, true, 6, 7)}, porcupine.Illegal},
		{"register: fresh write refused", modelRegister, []Op{
			write("B", 34, 3, true, 4, 5), write("C", 35, 4, false, 6, 7)}, porcupine.Illegal},
		{"register: read misses the last write", modelRegister, []Op{
			write("A", 1, 1, true, 0, 1), write("A", 1, 2, true, 2, 3), read("B", 1, 4, 5)}, porcupine.Illegal},
	}
	clients := map[string]int{"A": 0, "B": 1, "C": 2}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := operations(c.ops, []modelKind{c.model}, clients)
			if len(ops) != len(c.ops) {
				t.Fatalf("%d porcupine operations for %d ops", len(ops), len(c.ops))
			}
			if got := porcupine.CheckOperationsTimeout(model, ops, 10*time.Second); got != c.want {
				t.Errorf("verdict %s, want %s", got, c.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 3}, {99, 5}, {0, 1}, {100, 5}} {
		if got := Percentile(ds, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}
