package bench

import (
	"bufio"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}, {0.01, 1}} {
		if got := quantile(s, tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile of nothing = %v, want 0", got)
	}
}

func TestVersus(t *testing.T) {
	for _, tc := range []struct {
		d, o  float64
		lower bool
		want  string
	}{
		{100, 200, true, "distlock ahead, 2.00x"},
		{300, 100, true, "other ahead, 3.00x"},
		{300, 100, false, "distlock ahead, 3.00x"},
		{50, 100, false, "other ahead, 2.00x"},
		{0, 100, true, "n/a"},
	} {
		if got := versus(tc.d, tc.o, tc.lower); got != tc.want {
			t.Errorf("versus(%v, %v, %v) = %q, want %q", tc.d, tc.o, tc.lower, got, tc.want)
		}
	}
}

func TestFairness(t *testing.T) {
	if r, starved := fairness([]int{10, 5, 8}); r != 2 || starved != 0 {
		t.Errorf("fairness = %v, %d; want 2, 0", r, starved)
	}
	if r, starved := fairness([]int{10, 0, 0}); !math.IsInf(r, 1) || starved != 2 {
		t.Errorf("fairness with starved waiters = %v, %d; want +Inf, 2", r, starved)
	}
	if got := fmtFairness([]float64{1.5, -1}, 3); got != "∞ (3 waiters had no grant)" {
		t.Errorf("fmtFairness = %q", got)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=40,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n"
	got := parseCommandStats(info)
	if got["evalsha"] != (cmdStat{12, 40}) || got["config|resetstat"] != (cmdStat{1, 5}) || len(got) != 2 {
		t.Errorf("parseCommandStats = %v", got)
	}
}

func TestParseEtcdMetrics(t *testing.T) {
	text := `# HELP grpc_server_msg_received_total Total number of RPC stream messages received on the server.
grpc_server_msg_received_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 7
grpc_server_msg_received_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 2
etcd_mvcc_range_total 5
etcd_mvcc_txn_total 3
etcd_mvcc_put_total 1e+00
etcd_mvcc_db_total_size_in_bytes 20480
`
	s, err := parseEtcdMetrics(bufio.NewScanner(strings.NewReader(text)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 9 || s.Ops != 9 || s.ByName["Range"] != 7 || s.ByName["Watch"] != 2 {
		t.Errorf("parseEtcdMetrics = %+v", s)
	}
}

func TestContentionWaste(t *testing.T) {
	c := &ContentionResult{Grants: 10, Handoffs: 4, Total: 30 * time.Millisecond, HoldTotal: 10 * time.Millisecond}
	if got := c.Waste(); got != 5*time.Millisecond {
		t.Errorf("Waste = %v, want 5ms", got)
	}
	if got := c.WastePerGrant(); got != 2*time.Millisecond {
		t.Errorf("WastePerGrant = %v, want 2ms", got)
	}
	if got := (&ContentionResult{}).Waste(); got != 0 {
		t.Errorf("Waste without hand-offs = %v, want 0", got)
	}
}

func TestTopLevelMicrosCountsInnerCommandsOnce(t *testing.T) {
	// The floor's cycle: a SET sent by the client, and a script (sent) that
	// runs GET and DEL; a second SET that ran inside a script.
	before := Snapshot{ByName: map[string]int64{}, RequestsByName: map[string]int64{}, UsecByName: map[string]int64{}}
	after := Snapshot{
		ByName:         map[string]int64{"set": 2, "evalsha": 1, "get": 1, "del": 1},
		RequestsByName: map[string]int64{"set": 1, "evalsha": 1},
		UsecByName:     map[string]int64{"set": 4, "evalsha": 3, "get": 1, "del": 1},
	}
	if got, want := after.Sub(before).ServerMicros, int64(2+3); got != want {
		t.Fatalf("server time %d µs, want %d (the sent SET's share and the script, whose time holds its GET and DEL)", got, want)
	}
}

func TestPairedRatio(t *testing.T) {
	us := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Microsecond
		}
		return out
	}
	// Turns in fast spells and slow ones: a is 1.2x b in every turn but
	// the one where the spell changed between the two cycles. The p50s
	// fall in different spells (a has one more slow cycle), so their
	// ratio says 3.6x; the turns say 1.2x.
	a := us(60, 60, 180, 180, 180)
	b := us(50, 50, 150, 50, 150)
	if r := float64(quantile(sorted(a), 0.5)) / float64(quantile(sorted(b), 0.5)); r != 3.6 {
		t.Fatalf("ratio of p50s %v, want 3.6 (the case this guards against)", r)
	}
	q1, med, q3, ok := pairedRatio(a, b)
	if !ok || med != 1.2 || q1 != 1.2 || q3 != 1.2 {
		t.Errorf("pairedRatio = %v %v %v %v, want 1.2 1.2 1.2 true", q1, med, q3, ok)
	}
	for _, c := range []struct{ a, b []time.Duration }{{nil, nil}, {us(1), us(1, 2)}, {us(0), us(1)}} {
		if _, _, _, ok := pairedRatio(c.a, c.b); ok {
			t.Errorf("pairedRatio(%v, %v) paired", c.a, c.b)
		}
	}
}

func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// TestTurnOrders checks that the latency turns' orders put every subject
// right after every other one, where a rotation puts each (but the first
// of a turn) after the same one every time.
func TestTurnOrders(t *testing.T) {
	subs := []Subject{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "e"}}
	follows := func(order func(turn int) []Subject) map[[2]string]int {
		m := map[[2]string]int{}
		for turn := range 1000 {
			o := order(turn)
			for i := 1; i < len(o); i++ {
				m[[2]string{o[i-1].ID, o[i].ID}]++
			}
		}
		return m
	}
	if got := len(follows(func(turn int) []Subject { return rotated(subs, turn) })); got != len(subs) {
		t.Fatalf("a rotation makes %d pairs, want %d (the case this guards against)", got, len(subs))
	}
	rng := turnOrders()
	pairs := follows(func(int) []Subject { return shuffled(rng, subs) })
	// 4000 adjacent pairs over 20 ordered pairs: 200 each on average.
	for _, a := range subs {
		for _, b := range subs {
			if n := pairs[[2]string{a.ID, b.ID}]; a.ID != b.ID && (n < 120 || n > 280) {
				t.Errorf("%s came right after %s %d times in 1000 turns, want about 200", b.ID, a.ID, n)
			}
		}
	}
}

// TestServicesAdjacent checks that the subjects of each service are
// listed together: the uncontended cycles take their turns among the
// subjects of a run of one service (see latency), and pairedRatio pairs
// two subjects' cycles by their index, which a service split in two runs
// would pair across different turns.
func TestServicesAdjacent(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for _, s := range Subjects {
		if s.Service != prev && seen[s.Service] {
			t.Errorf("subject %s of service %s is listed apart from the service's others", s.ID, s.Service)
		}
		seen[s.Service] = true
		prev = s.Service
	}
}
