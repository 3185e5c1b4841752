package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// semParams are tiny sizes for the semaphore measurement's own tests.
var semParams = Params{
	Rounds: 2, LatencyOps: 5, LatencyCountOps: 3,
	ContentionGrants: 12, ContentionRounds: 1, ContentionLimit: time.Minute, Hold: time.Millisecond,
	SemaphoreLimit: 2, SemaphoreWorkers: 4,
}

// lockOnly hides every interface of a backend but driver.Backend: a
// backend that grants no permits.
type lockOnly struct{ driver.Backend }

// refusing implements driver.Semaphores and refuses every permit as
// unsupported, as a wrapper over a backend without permits would.
type refusing struct{ driver.Backend }

func (refusing) AcquirePermit(context.Context, string, driver.Semaphore, driver.AcquireOptions) (driver.Lease, error) {
	return nil, fmt.Errorf("refusing: %w", errors.ErrUnsupported)
}

func (refusing) Permits(context.Context, string) (driver.PermitState, error) {
	return driver.PermitState{}, errors.ErrUnsupported
}

// overGranting grants twice the limit its askers name: the measurement
// must see more holders than the limit.
type overGranting struct{ *memlock.Backend }

func (o overGranting) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	sem.Limit *= 2
	return o.Backend.AcquirePermit(ctx, key, sem, opts)
}

// semSubject is a distlock row over b, every instance sharing it.
func semSubject(id string, b driver.Backend) Subject {
	return Subject{ID: id, Name: "distlock " + id, Service: SvcInProcess, Kind: KindDistlock, Measures: Semaphore,
		Open: func(*Env) (Locker, error) { return newDistlockLocker(b, false, func() error { return nil }) }}
}

// The measurement takes the rows whose backend grants permits, found at
// run time, and records why the others take none; the report shows both.
func TestSemaphoreMeasureFollowsTheBackend(t *testing.T) {
	subs := []Subject{
		semSubject("permits", memlock.New()),
		semSubject("lock-only", lockOnly{memlock.New()}),
		semSubject("refusing", refusing{memlock.New()}),
	}
	p := semParams
	r := NewRunner(t, nil, p, subs)
	res := &Results{Params: p, Semaphore: r.semaphores(context.Background())}
	checkResults(t, p, res, subs)

	sr := res.Semaphore["permits"]
	if sr == nil || sr.NoPermits != "" {
		t.Fatalf("memlock's row was not measured: %+v", sr)
	}
	if want := p.Rounds * p.LatencyOps; len(sr.Lock) != want || len(sr.Permit) != want {
		t.Errorf("%d lock and %d permit cycles, want %d of each", len(sr.Lock), len(sr.Permit), want)
	}
	sc := sr.Contended
	if sc == nil {
		t.Fatal("no contended rounds")
	}
	if want := p.SemaphoreWorkers * (p.ContentionGrants / p.SemaphoreWorkers); sc.Grants != want || len(sc.Waits) != want {
		t.Errorf("%d grants, %d waits, want %d", sc.Grants, len(sc.Waits), want)
	}
	if sc.Peak < 1 || sc.Peak > p.SemaphoreLimit || sc.Violations != 0 {
		t.Errorf("peak %d, %d violations, on %d permits", sc.Peak, sc.Violations, p.SemaphoreLimit)
	}
	if u := sc.Use(); u <= 0 || u > 1 {
		t.Errorf("use %v, want in (0, 1]", u)
	}

	if sr := res.Semaphore["lock-only"]; sr == nil || !strings.Contains(sr.NoPermits, "does not implement driver.Semaphores") || len(sr.Lock) > 0 {
		t.Errorf("lock-only row: %+v, want no permits", sr)
	}
	if sr := res.Semaphore["refusing"]; sr == nil || !strings.Contains(sr.NoPermits, "unsupported") || len(sr.Lock) > 0 {
		t.Errorf("refusing row: %+v, want no permits", sr)
	}

	var b strings.Builder
	rp := &Report{Subjects: subs, Res: res}
	rp.writeSemaphores(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, 9)
	md := b.String()
	for _, want := range []string{
		"## 9. Semaphores",
		"| " + SvcInProcess + " | distlock permits | ",
		"| " + SvcInProcess + " | distlock lock-only | no permits: its backend (bench.lockOnly) does not implement driver.Semaphores",
		"| " + SvcInProcess + " | distlock refusing | no permits: ",
		"| " + SvcInProcess + " | distlock permits | 4 / 2 | 12 | ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// Results of a run before the measurement existed render a section that
// says so.
func TestSemaphoreSectionWithoutResults(t *testing.T) {
	var b strings.Builder
	rp := &Report{Res: &Results{}}
	rp.writeSemaphores(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, 7)
	if !strings.Contains(b.String(), "Not measured in this run") {
		t.Errorf("section: %s", b.String())
	}
}

// A backend that grants more permits than the limit is caught: the
// contended rounds count the holders at every grant. Each holder keeps
// its permit for long enough that the workers overlap; rounds are taken
// until one shows it, within a deadline far beyond what that needs.
func TestSemaphoreRoundCountsOverGrants(t *testing.T) {
	s := semSubject("over", overGranting{memlock.New()})
	p := semParams
	p.Hold = 20 * time.Millisecond
	r := NewRunner(t, nil, p, []Subject{s})
	sc := &SemaphoreContention{Workers: p.SemaphoreWorkers, Limit: p.SemaphoreLimit}
	deadline := time.Now().Add(time.Minute)
	for round := 0; sc.Violations == 0; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("no grant above the limit seen in %d rounds of an over-granting backend: %d grants, peak %d on %d permits, errors %v",
				round, sc.Grants, sc.Peak, sc.Limit, sc.Errors)
		}
		r.semaphoreRound(context.Background(), s, round, sc)
	}
	if sc.Peak <= p.SemaphoreLimit {
		t.Errorf("%d violations with peak %d, on %d permits", sc.Violations, sc.Peak, p.SemaphoreLimit)
	}
	if len(sc.Errors) > 0 || sc.Incomplete > 0 {
		t.Errorf("errors %v, %d incomplete", sc.Errors, sc.Incomplete)
	}
}
