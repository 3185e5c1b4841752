//go:build linux

package cli_test

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
)

// pyLeader is a leader as e2e.py prints it.
type pyLeader struct {
	Value string
	Token uint64 `json:"token,string"`
}

// The Python client's elections, through `distlock serve`: one leader at
// a time, the next elected on a resignation, a stale resignation refused,
// a campaigner whose session dies losing its term before the next is
// elected, a term forced away seen lost, and observe following it all in
// term order.
func TestPythonClientElection(t *testing.T) {
	e := newEnv(t)
	s := e.serve("--allow-force-release") // the script forces a term away, as an operator does
	defer func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		e.wait(s.started)
	}()
	out, err := python(t, "elect", s.url, e.tmp).Output()
	if err != nil {
		t.Fatalf("python3 e2e.py elect: %v\n%s", err, stderrOf(err))
	}
	var got struct {
		LeaderBefore           *pyLeader `json:"leader_before"`
		ShortCampaign          string    `json:"short_campaign"`
		ShortCampaignLeader    *pyLeader `json:"short_campaign_leader"`
		SecondWaits            bool      `json:"second_waits"`
		LeaderFirst            *pyLeader `json:"leader_first"`
		T1                     uint64    `json:"t1,string"`
		T2                     uint64    `json:"t2,string"`
		T3                     uint64    `json:"t3,string"`
		FirstValidAfterResign  bool      `json:"first_valid_after_resign"`
		StaleResign            string    `json:"stale_resign"`
		LeaderAfterStale       *pyLeader `json:"leader_after_stale"`
		DeadDeadlineBeforeNext bool      `json:"dead_deadline_before_next"`
		DeadValid              bool      `json:"dead_valid"`
		ForcedLost             string    `json:"forced_lost"`
		LeaderAfter            *pyLeader `json:"leader_after"`
		Observed               []string  `json:"observed"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("python: %s", out)
	leads := func(l *pyLeader, tok uint64) bool { return l != nil && l.Token == tok }
	switch {
	case got.LeaderBefore != nil || got.LeaderAfter != nil:
		t.Errorf("leader before the first term %v, after the last %v: want None", got.LeaderBefore, got.LeaderAfter)
	case got.ShortCampaign != "not-elected" || !leads(got.ShortCampaignLeader, got.T1):
		t.Errorf("a campaign whose wait ended while the first led: %q, leader %v", got.ShortCampaign, got.ShortCampaignLeader)
	case !got.SecondWaits || !leads(got.LeaderFirst, got.T1):
		t.Errorf("while the first led: second waits %v, leader %v", got.SecondWaits, got.LeaderFirst)
	case got.T1 == 0 || got.T2 <= got.T1 || got.T3 <= got.T2:
		t.Errorf("terms %d, %d, %d: not increasing", got.T1, got.T2, got.T3)
	case got.FirstValidAfterResign:
		t.Errorf("the first term was valid after its resignation")
	case got.StaleResign != "not-held" || !leads(got.LeaderAfterStale, got.T2):
		t.Errorf("stale resignation: %q, leader after it %v; want not-held, the second's term untouched", got.StaleResign, got.LeaderAfterStale)
	case !got.DeadDeadlineBeforeNext || got.DeadValid:
		t.Errorf("the dead session's term was valid until %v the next election (valid after: %v)", !got.DeadDeadlineBeforeNext, got.DeadValid)
	case got.ForcedLost != "forced_release":
		t.Errorf("forced loss seen as %q, want forced_release", got.ForcedLost)
	}
	// Observe: the states in term order, each awaited by the script.
	want := []string{"", fmt.Sprintf("%d=10.0.0.1:80", got.T1), fmt.Sprintf("%d=10.0.0.1:81", got.T1),
		fmt.Sprintf("%d=10.0.0.2:80", got.T2), fmt.Sprintf("%d=10.0.0.3:80", got.T3), ""}
	i := 0
	var last uint64
	for _, st := range got.Observed {
		var n uint64
		fmt.Sscanf(st, "%d=", &n)
		if n != 0 && n < last {
			t.Errorf("observed %q: token %d after %d", got.Observed, n, last)
		}
		last = max(last, n)
		if i < len(want) && st == want[i] {
			i++
		}
	}
	if i != len(want) {
		t.Errorf("observed %q, want %q in order", got.Observed, want)
	}
}
