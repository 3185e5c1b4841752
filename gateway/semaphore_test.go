package gateway_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// forPermitBackends runs f over a gateway of each backend of the
// election tests, which all grant permits.
func forPermitBackends(t *testing.T, f func(t *testing.T, g *gw)) {
	for _, b := range electionBackends {
		t.Run(b.name, func(t *testing.T) {
			be := b.open(t)
			if _, ok := be.(driver.Semaphores); !ok {
				t.Fatalf("%s grants no permits", b.name)
			}
			f(t, start(t, be))
		})
	}
}

// A lock service without permits answers 501, and holds nothing.
func TestPermitsUnsupported(t *testing.T) {
	g := start(t, noPermits{memlock.New()})
	sid := g.session("", "a", "10s")
	g.permit(sid, "exports", 2, false, "0").want(t, 501, gateway.ProblemUnsupported)
	g.do("GET", "/v1/semaphores/exports", "", nil).want(t, 501, gateway.ProblemUnsupported)
	g.acquire("", sid, "semaphore/exports", "0").want(t, 200, "")
}

// noPermits is a Backend that grants locks only.
type noPermits struct{ b *memlock.Backend }

func (n noPermits) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	return n.b.Acquire(ctx, key, opts)
}

// permit asks for a permit of the semaphore name in session sid.
func (g *gw) permit(sid, name string, limit int, slots bool, wait string) answer {
	g.t.Helper()
	return g.do("POST", "/v1/semaphores/"+esc(name)+"/acquire?wait="+wait, "",
		map[string]any{"session": sid, "limit": limit, "slots": slots})
}

// Sessions get permits of a semaphore up to its limit, each with its own
// token and slot; the next waits, a limit other than the stored one and a
// lock of the semaphore's key held as a permit are refused; a permit is
// released through the lock routes, as semaphore/NAME, and the semaphore's
// state lists the live permits.
func TestPermits(t *testing.T) {
	forPermitBackends(t, func(t *testing.T, g *gw) {
		a, b, c := g.session("", "a", "10s"), g.session("", "b", "10s"), g.session("", "c", "10s")
		pa := g.permit(a, "exports", 2, true, "0").want(t, 200, "")
		pb := g.permit(b, "exports", 2, true, "0").want(t, 200, "")
		if pa.str("lock") != "semaphore/exports" || pa.str("semaphore") != "exports" {
			t.Fatalf("permit: %s; want the semaphore exports held as semaphore/exports", pa.raw)
		}
		ta, _ := strconv.ParseUint(pa.str("token"), 10, 64)
		tb, _ := strconv.ParseUint(pb.str("token"), 10, 64)
		if ta == 0 || tb <= ta {
			t.Fatalf("tokens %d then %d; want increasing", ta, tb)
		}
		if sa, sb := pa.num("slot"), pb.num("slot"); sa == sb || sa+sb != 1 {
			t.Fatalf("slots %v and %v; want 0 and 1", pa.body["slot"], pb.body["slot"])
		}
		// A retry answers the session's permit.
		if again := g.permit(a, "exports", 2, true, "0").want(t, 200, ""); again.str("token") != pa.str("token") {
			t.Fatalf("a retried acquire answered %s; want the permit of token %d", again.raw, ta)
		}
		// A retry naming another limit, or slots otherwise, is refused.
		g.permit(a, "exports", 3, true, "0").want(t, 409, gateway.ProblemLimitMismatch)
		g.permit(a, "exports", 2, false, "0").want(t, 409, gateway.ProblemNotAcquired)
		g.permit(c, "exports", 2, true, "0").want(t, 409, gateway.ProblemNotAcquired)
		g.permit(c, "exports", 3, true, "0").want(t, 409, gateway.ProblemLimitMismatch)
		g.acquire("", a, "semaphore/exports", "0").want(t, 409, gateway.ProblemNotAcquired)

		st := g.do("GET", "/v1/semaphores/exports", "", nil).want(t, 200, "")
		hs, _ := st.body["holders"].([]any)
		if st.num("limit") != 2 || len(hs) != 2 || st.str("lock") != "semaphore/exports" {
			t.Fatalf("state: %s; want limit 2 and both permits", st.raw)
		}
		for i, want := range []string{pa.str("token"), pb.str("token")} {
			h, _ := hs[i].(map[string]any)
			if h["token"] != want || h["slot"] == nil {
				t.Fatalf("state: holder %d is %v; want token %s with its slot", i, h, want)
			}
		}

		g.do("POST", "/v1/locks/"+esc("semaphore/exports")+"/release", "", map[string]any{"session": a, "token": pa.str("token")}).
			want(t, 200, "")
		pc := g.permit(c, "exports", 2, true, "10s").want(t, 200, "")
		if tc, _ := strconv.ParseUint(pc.str("token"), 10, 64); tc <= tb || pc.num("slot") != pa.num("slot") {
			t.Fatalf("after a release: %s; want a token above %d and the released slot %v", pc.raw, tb, pa.body["slot"])
		}
		// Ending the sessions gives their permits back.
		for _, sid := range []string{b, c} {
			g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
		}
		st = g.do("GET", "/v1/semaphores/exports", "", nil).want(t, 200, "")
		if hs, _ := st.body["holders"].([]any); len(hs) != 0 || st.num("limit") != 0 {
			t.Fatalf("state after the sessions ended: %s; want no permit and no stored limit", st.raw)
		}
	})
}

// Bad requests for permits get 400 problems.
func TestPermitsBadRequests(t *testing.T) {
	forPermitBackends(t, func(t *testing.T, g *gw) {
		sid := g.session("", "a", "10s")
		g.permit(sid, "exports", 0, false, "0").want(t, 400, gateway.ProblemBadRequest)
		g.permit(sid, "exports", 65537, false, "0").want(t, 400, gateway.ProblemBadRequest)
		g.do("POST", "/v1/semaphores/exports/acquire", "", map[string]any{"session": sid, "limit": 2, "extra": 1}).
			want(t, 400, gateway.ProblemBadRequest)
		g.permit(sid, "a\x00b", 2, false, "0").want(t, 400, gateway.ProblemBadName)
		g.do("GET", "/v1/semaphores/"+esc("a\x00b"), "", nil).want(t, 400, gateway.ProblemBadName)
	})
}
