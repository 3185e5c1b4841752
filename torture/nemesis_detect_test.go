package torture

import (
	"reflect"
	"testing"
	"time"

	"github.com/distlock/distlock/testserver"
)

// TestNemesisCutoffs checks the detection times on a made-up history
// (times in ms): the fault blamed is the latest one that reached the
// holder while it held, before its loss; a grant released in time is
// not cut off; a fault of another worker does not reach the holder; a
// server's fault reaches every holder; a grant that another worker was
// granted over, unknown to its holder, is cut off with no loss reported.
func TestNemesisCutoffs(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	var ops []Op
	grant := func(id int, w string, acq, ret, live, end int64, lost bool) {
		ops = append(ops, Op{Kind: KindAcquire, Worker: w, Key: "k", Grant: id, Call: ms(acq), Return: ms(ret), Outcome: OutcomeOK})
		e := Op{Kind: KindEnd, Worker: w, Key: "k", Grant: id, Call: ms(live), Return: ms(end), Outcome: OutcomeOK}
		if lost {
			e.Outcome = OutcomeLost
		}
		ops = append(ops, e)
	}
	release := func(id int, w string, call, ret int64, lost bool) {
		r := Op{Kind: KindRelease, Worker: w, Key: "k", Grant: id, Call: ms(call), Return: ms(ret), Outcome: OutcomeOK}
		if lost {
			r.Outcome = OutcomeLost
		}
		ops = append(ops, r)
	}
	// 1: A holds 0-100 and releases in time, though a pause of A came at
	// 50 (not cut off).
	grant(1, "A", 0, 10, 90, 101, false)
	release(1, "A", 100, 102, false)
	// 2: B holds from 110; a lock-cut of A at 150 (not B's), a
	// lock-cut of B at 200, a pause of B at 300; B's end reports the
	// loss at 1400; A is granted at 1300.
	grant(2, "B", 100, 110, 250, 1400, true)
	// 3: A, granted at 1300 over B, holds; a server pause at 1500 cuts
	// it off; C is granted at 2600 while A still believes it holds
	// (A's release at 2700 finds the lock lost).
	grant(3, "A", 1200, 1300, 1350, 2710, false)
	release(3, "A", 2700, 2705, true)
	grant(4, "C", 1500, 2600, 2800, 2900, false)
	release(4, "C", 2890, 2895, false)
	faults := []nemesisFault{
		{kind: NemesisHolderPause, at: ms(50), workers: []string{"A"}},
		{kind: NemesisLockCut, at: ms(150), workers: []string{"A"}},
		{kind: NemesisLockCut, at: ms(200), workers: []string{"B"}},
		{kind: NemesisHolderPause, at: ms(300), workers: []string{"B"}},
		{kind: NemesisServerPause, at: ms(1500)},
	}
	got := nemesisCutoffs(ops, faults)
	want := []NemesisCutoff{
		{Kind: NemesisHolderPause, Worker: "B", Key: "k", Loss: 1100 * time.Millisecond, Grant: 1000 * time.Millisecond},
		{Kind: NemesisServerPause, Worker: "A", Key: "k", Loss: 1205 * time.Millisecond, Grant: 1100 * time.Millisecond},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cutoffs:\n got %+v\nwant %+v", got, want)
	}
	nr := &NemesisResult{Cutoffs: got}
	loss, next := nr.DetectionTimes()
	if !reflect.DeepEqual(loss, []time.Duration{1100 * time.Millisecond, 1205 * time.Millisecond}) || !reflect.DeepEqual(next, []time.Duration{1000 * time.Millisecond, 1100 * time.Millisecond}) {
		t.Fatalf("detection times %v, %v", loss, next)
	}
	if s := p50Max(loss); s != "1.1s / 1.205s (2)" {
		t.Fatalf("p50Max %q", s)
	}
	// B (granted 110, proven live to 250) and A (granted 1300): no
	// overlap. A (proven live to 1350) and C (granted 2600): none either.
	if n, _ := nemesisClockOverlaps(ops, ClockSteps{At: []int64{ms(120)}, TTL: time.Second}); n != 0 {
		t.Fatalf("%d overlaps explained by a clock step, in a history without overlaps", n)
	}
}

// TestNemesisClockJumpFault injects the nemesis's clock jump, as the
// schedule does (nemesisApply), into one Redis while A holds the lock:
// A's key expires early, B is granted at once with a higher token and
// writes, and A, whose own clock is right, writes after it. The unfenced
// store accepts A's stale write; the fenced store refuses it. The overlap
// is explained by the clock's step (Judge reports nothing), and the
// detection times blame the jump: B's grant, and A's release finding its
// lock lost, came after it.
func TestNemesisClockJumpFault(t *testing.T) {
	srv := testserver.StartRedis(t, testserver.WithRedisAppendOnly(), testserver.WithRedisMovableClock())
	nt := NemesisTarget{Target: Target{Kind: backendRedis, Redis: srv}, Servers: []*testserver.Process{srv.Process},
		Clocks: []*testserver.MovableClock{srv.Clock}, Deployment: "one Redis, appendfsync always"}
	if k := nt.kinds(); k[len(k)-1] != NemesisServerClockJump {
		t.Fatalf("a Redis with a movable clock takes %v, want %s among them", k, NemesisServerClockJump)
	}
	const ttl = 5 * time.Second
	for _, mode := range []Mode{Unfenced, Fenced} {
		t.Run(mode.String(), func(t *testing.T) {
			res := &Result{Backend: backendRedis, Scenario: "nemesis-clock-jump", Mode: mode, Rounds: 1}
			r := NewRun(t, mode)
			f := &Fixture{T: t, Run: r, Target: nt.Target, P: Params{TTL: ttl}, Res0: res, Key: "clock-jump-" + mode.String(), Res: "res-clock-jump-" + mode.String()}
			var ws []*nemesisWorker
			for _, name := range []string{"A", "B"} {
				w, err := f.open(name, WorkerConfig{TTL: ttl})
				if err != nil {
					t.Fatal(err)
				}
				ws = append(ws, &nemesisWorker{w: w})
			}
			a, b := ws[0].w, ws[1].w
			ta, err := a.Acquire(f.Key, Acq{Wait: true})
			if err != nil {
				t.Fatal(err)
			}
			if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
				t.Fatal(res.Err)
			}
			ev := NemesisEvent{Kind: NemesisServerClockJump, Target: 0, For: ttl, Jump: 2 * ttl}
			cut, ok := nemesisCut(ev, true, ws, r.Clock.Now())
			if !ok {
				t.Fatal("a forward clock jump's start is not a fault that cuts holders off")
			}
			if err := nemesisApply(t, r, nt, ws, ev, true); err != nil {
				t.Fatal(err)
			}
			tb, err := b.Acquire(f.Key, Acq{Wait: true, Timeout: ttl})
			if err != nil {
				t.Fatalf("B was not granted after the jump: %v", err)
			}
			if tb <= ta {
				t.Fatalf("B's token %d not above A's %d", tb, ta)
			}
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				t.Fatal(res.Err)
			}
			if res := a.RMW(f.Res, RMWOptions{NoCheck: true}); res.Err != nil {
				t.Fatal(res.Err)
			}
			if _, ok := nemesisCut(ev, false, ws, r.Clock.Now()); ok {
				t.Fatal("a forward clock jump's return is a fault that cuts holders off")
			}
			if err := nemesisApply(t, r, nt, ws, ev, false); err != nil {
				t.Fatal(err)
			}
			if got := srv.Clock.Offset(); got != 0 {
				t.Fatalf("the server's clock is %v off after the jump's end", got)
			}
			for _, w := range []*Worker{b, a} {
				if err := f.releaseNow(w); err != nil {
					t.Fatal(err)
				}
			}
			r.Check(res, "")
			nr := &NemesisResult{Result: res, Faults: map[string]int{NemesisServerClockJump: 1}}
			nr.Cutoffs = nemesisCutoffs(res.Ops, []nemesisFault{cut})
			nr.judgeClock(res.Ops, ClockSteps{At: []int64{cut.at}, TTL: ttl}, "")
			t.Logf("stale %d/%d/%d, overlaps %d (%d after the clock's step), cutoffs %+v, verdicts %v",
				res.StaleAttempted, res.StaleRefused, res.StaleAccepted, res.Overlaps, nr.ClockOverlaps, nr.Cutoffs, res.Verdicts)
			if res.StaleAttempted != 1 {
				t.Fatalf("%d stale writes, want A's one", res.StaleAttempted)
			}
			if mode == Unfenced && res.StaleAccepted != 1 {
				t.Errorf("unfenced: A's stale write not accepted")
			}
			if mode == Fenced && (res.StaleRefused != 1 || res.StaleAccepted != 0) {
				t.Errorf("fenced: A's stale write not refused (refused %d, accepted %d)", res.StaleRefused, res.StaleAccepted)
			}
			if res.Overlaps != nr.ClockOverlaps {
				t.Errorf("%d overlaps, %d of them explained by the clock's step", res.Overlaps, nr.ClockOverlaps)
			}
			if bad := nr.Judge(); len(bad) > 0 {
				t.Errorf("Judge: %v", bad)
			}
			if len(nr.Cutoffs) != 1 || nr.Cutoffs[0].Worker != "A" || nr.Cutoffs[0].Kind != NemesisServerClockJump || nr.Cutoffs[0].Grant < 0 {
				t.Errorf("cutoffs %+v, want A's, by the clock jump, with B's grant", nr.Cutoffs)
			}
		})
	}
}

// TestNemesisAcquireErrorsNote checks the note of a run's failed
// acquisitions: counted by kind, in the kinds' order, with the first
// message of each.
func TestNemesisAcquireErrorsNote(t *testing.T) {
	m := &nemesisMode{nr: &NemesisResult{}}
	if n := m.acquireErrorsNote(); n != "" {
		t.Fatalf("no failure noted as %q, want none", n)
	}
	for _, e := range []*WorkerError{
		{Worker: "W1", Cmd: "acquire", Kind: kindUnavailable, Msg: "first unavailable"},
		{Worker: "W0", Cmd: "acquire", Kind: kindNotAcquired, Msg: "first not acquired"},
		{Worker: "W2", Cmd: "acquire", Kind: kindUnavailable, Msg: "second unavailable"},
	} {
		m.acquireFailed(e)
	}
	want := "failed acquisitions by kind: not-acquired 1 (first: " + (&WorkerError{Worker: "W0", Cmd: "acquire", Kind: kindNotAcquired, Msg: "first not acquired"}).Error() +
		"); unavailable 2 (first: " + (&WorkerError{Worker: "W1", Cmd: "acquire", Kind: kindUnavailable, Msg: "first unavailable"}).Error() + ")"
	if n := m.acquireErrorsNote(); n != want {
		t.Fatalf("note %q, want %q", n, want)
	}
	if m.nr.AcquireErrors != 3 {
		t.Fatalf("%d failed acquisitions counted, want 3", m.nr.AcquireErrors)
	}
}
