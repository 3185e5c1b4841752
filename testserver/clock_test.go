package testserver

import (
	"strconv"
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
