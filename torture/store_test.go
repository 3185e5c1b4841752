package torture

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/distlock/distlock/testserver"
)

// The store's modes: fenced and pg-fenced refuse a token below the highest
// admitted (and admit an equal one), unfenced accepts it and marks it
// stale; all record every operation. The pg-fenced store keeps the value in
// PostgreSQL.
func TestStore(t *testing.T) {
	for _, mode := range []Mode{Unfenced, Fenced, PGFenced} {
		t.Run(mode.String(), func(t *testing.T) {
			clock, hist := NewClock(), &History{}
			s, err := StartStore(mode, clock, hist)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if mode == PGFenced {
				if err := s.usePostgres(testserver.StartPostgres(t)); err != nil {
					t.Fatal(err)
				}
			}
			c := &storeClient{addr: s.Addr(), worker: "A"}
			defer c.close()
			steps := []struct {
				token     uint64
				value     int64
				wantStale bool // refused (fenced) or marked stale (unfenced)
			}{
				{33, 1, false},
				{33, 2, false}, // same holder, second write
				{34, 3, false},
				{33, 4, true}, // the paused holder wakes up
				{0, 5, true},  // no grant has token 0
			}
			for i, st := range steps {
				_, stale, err := c.write("r", st.token, st.value, time.Second)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if want := st.wantStale && mode != Unfenced; stale != want {
					t.Errorf("step %d: refused %v, want %v", i, stale, want)
				}
			}
			v, _, err := c.read("r", 34, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			want := map[Mode]int64{Fenced: 3, PGFenced: 3, Unfenced: 5}[mode]
			if v != want || s.Value("r") != want {
				t.Errorf("value %d (store %d), want %d", v, s.Value("r"), want)
			}
			if mode == PGFenced {
				if v, err := s.pg.read("r"); err != nil || v != want {
					t.Errorf("value in PostgreSQL: %d, %v; want %d", v, err, want)
				}
			}
			var writes, stale int
			for _, op := range hist.Ops() {
				if op.Kind == KindWrite {
					writes++
					if op.Stale {
						stale++
					}
					if op.Call > op.Return {
						t.Errorf("op %d: call %d after return %d", op.Seq, op.Call, op.Return)
					}
				}
			}
			if writes != len(steps) || stale != 2 {
				t.Errorf("%d writes recorded, %d stale; want %d and 2", writes, stale, len(steps))
			}
			res := operations(hist.Ops(), []modelKind{modelRegister}, map[string]int{"A": 0})
			wantVerdict := map[Mode]porcupine.CheckResult{Fenced: porcupine.Ok, PGFenced: porcupine.Ok, Unfenced: porcupine.Illegal}[mode]
			if got := porcupine.CheckOperationsTimeout(model, res, 10*time.Second); got != wantVerdict {
				t.Errorf("register model: %s, want %s", got, wantVerdict)
			}
		})
	}
}

// Bad requests get an error line and do not stop the store.
func TestStoreBadRequests(t *testing.T) {
	s, err := StartStore(Fenced, NewClock(), &History{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for _, line := range []string{"", "X", "W r notanumber 1", "W r 1", "R r -1", "HELLO"} {
		if _, err := conn.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		reply, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(reply, "ERR ") {
			t.Errorf("%q: reply %q, want an error", line, reply)
		}
	}
	if _, err := conn.Write([]byte("W r 1 7\n")); err != nil {
		t.Fatal(err)
	}
	if reply, _ := r.ReadString('\n'); !strings.HasPrefix(reply, "OK ") {
		t.Errorf("a good write after bad requests: %q", reply)
	}
}
