package testserver

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRedisMovableClock moves a server's wall clock forward: a key's PTTL
// drops by the jump, TIME reports the moved clock, a key whose TTL the
// jump passed is gone, and the offset stays across a restart.
func TestRedisMovableClock(t *testing.T) {
	r := StartRedis(t, WithRedisMovableClock())
	if _, err := r.Do("SET", "k", "v", "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Do("SET", "short", "v", "PX", "20000"); err != nil {
		t.Fatal(err)
	}
	before := pttl(t, r, "k")
	if before < 50000 {
		t.Fatalf("PTTL before the jump: %d, want about 60000", before)
	}
	serverNow := func() time.Time {
		v, err := r.Do("TIME")
		if err != nil {
			t.Fatal(err)
		}
		a, _ := v.([]any)
		if len(a) != 2 {
			t.Fatalf("TIME replied %v", v)
		}
		s, _ := strconv.ParseInt(a[0].(string), 10, 64)
		us, _ := strconv.ParseInt(a[1].(string), 10, 64)
		return time.Unix(s, us*1000)
	}
	if skew := serverNow().Sub(time.Now()); skew.Abs() > 5*time.Second {
		t.Fatalf("server clock %v from ours before any jump", skew)
	}

	r.Clock.Jump(30 * time.Second)
	after := pttl(t, r, "k")
	// The jump takes 30000ms off; the rest is the time between the reads.
	if drop := before - after; drop < 30000 || drop > 40000 {
		t.Fatalf("PTTL %d before the jump, %d after: dropped by %d, want 30000 and a little", before, after, drop)
	}
	if skew := serverNow().Sub(time.Now()); skew < 25*time.Second || skew > 35*time.Second {
		t.Fatalf("server clock %v from ours after a 30s jump", skew)
	}
	if v, err := r.Do("GET", "short"); err != nil || v != nil {
		t.Fatalf("GET of a key whose 20s TTL the jump passed: %v, %v; want nil", v, err)
	}
	if got := r.Clock.Offset(); got != 30*time.Second {
		t.Fatalf("Offset %v, want 30s", got)
	}

	r.Restart(t)
	if skew := serverNow().Sub(time.Now()); skew < 25*time.Second {
		t.Fatalf("server clock %v from ours after a restart, want the 30s offset kept", skew)
	}
	r.Clock.Jump(-30 * time.Second)
	if skew := serverNow().Sub(time.Now()); skew.Abs() > 5*time.Second {
		t.Fatalf("server clock %v from ours after jumping back", skew)
	}
}

func pttl(t *testing.T, r *Redis, key string) int64 {
	t.Helper()
	v, err := r.Do("PTTL", key)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := v.(int64)
	return n
}

// TestPostgresMovableClock moves a PostgreSQL server's wall clock: now()
// and clock_timestamp() move by the jump (in every backend: each is
// forked from the postmaster, the shim's mapping with it), a row that expires by now() (as pglock's lease rows do) is
// expired by a jump past its expiry, and the offset stays across a
// restart after a kill.
func TestPostgresMovableClock(t *testing.T) {
	p := StartPostgres(t, WithPostgresMovableClock())
	if p.Clock == nil {
		t.Fatal("Postgres.Clock is nil with WithPostgresMovableClock")
	}
	// serverSkew reads now() and clock_timestamp() and checks that each
	// is within [before, after] of our clock moved by want (to the
	// microsecond PostgreSQL keeps, and a millisecond for the rounding of
	// the epoch's text).
	serverSkew := func(want time.Duration) {
		t.Helper()
		before := time.Now()
		out := psql(t, p, "select extract(epoch from now())::text || ' ' || extract(epoch from clock_timestamp())::text")
		after := time.Now()
		fields := strings.Fields(out)
		if len(fields) != 2 {
			t.Fatalf("now(), clock_timestamp(): %q", out)
		}
		for i, name := range []string{"now()", "clock_timestamp()"} {
			secs, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, fields[i], err)
			}
			got := time.Unix(0, int64(secs*1e9))
			lo, hi := before.Add(want-time.Millisecond), after.Add(want+time.Millisecond)
			if got.Before(lo) || got.After(hi) {
				t.Fatalf("%s = %v, want within [%v, %v] (our clock moved by %v)", name, got, lo, hi, want)
			}
		}
	}
	serverSkew(0)
	psql(t, p, "create table leases(k text primary key, expires timestamptz); insert into leases values ('a', now() + interval '30 seconds')")
	if got := psql(t, p, "select count(*) from leases where expires > now()"); got != "1" {
		t.Fatalf("live leases before the jump: %s, want 1", got)
	}

	p.Clock.Jump(time.Minute)
	serverSkew(time.Minute)
	if got := psql(t, p, "select count(*) from leases where expires > now()"); got != "0" {
		t.Fatalf("live leases after a jump past their expiry: %s, want 0", got)
	}
	p.Clock.Jump(-2 * time.Minute)
	serverSkew(-time.Minute)
	if got := psql(t, p, "select count(*) from leases where expires > now()"); got != "1" {
		t.Fatalf("live leases after jumping back: %s, want 1", got)
	}
	if got := p.Clock.Offset(); got != -time.Minute {
		t.Fatalf("Offset %v, want -1m", got)
	}

	p.Kill()
	p.Restart(t)
	serverSkew(-time.Minute)
	p.Clock.Jump(time.Minute)
	serverSkew(0)
}
