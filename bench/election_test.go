package bench

import (
	"context"
	"sync"
	"testing"
	"time"
)

// semElector is a candidate of in-process elections, one term at a time
// per name: the elections of a test, without a service.
type semElector struct {
	mu   *sync.Mutex
	sems map[string]chan struct{}
}

func (el semElector) Campaign(ctx context.Context, name, _ string) (Unlock, error) {
	el.mu.Lock()
	sem := el.sems[name]
	if sem == nil {
		sem = make(chan struct{}, 1)
		el.sems[name] = sem
	}
	el.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return func(context.Context) error { <-sem; return nil }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (semElector) Close() error { return nil }

// A round records every term, each candidate's last among them (taken
// once the round's terms have begun, and resigned at once): the check of
// two leaders at once sees the round's final hand-offs too. (It saw only
// the first ElectionTerms terms before.)
func TestElectionRoundRecordsEveryTerm(t *testing.T) {
	var mu sync.Mutex
	sems := map[string]chan struct{}{}
	s := Subject{ID: "sem", Name: "in-process", Measures: Election,
		Elect: func(*Env) (Elector, error) { return semElector{mu: &mu, sems: sems}, nil }}
	p := Params{Rounds: 1, ContentionLimit: time.Minute, Hold: time.Millisecond, ElectionCandidates: 3, ElectionTerms: 10}
	r := NewRunner(t, nil, p, []Subject{s})
	er := r.elections(context.Background())[s.ID]
	if want := p.ElectionTerms + p.ElectionCandidates; er.Terms != want {
		t.Errorf("%d terms recorded, want %d (%d, and each candidate's last)", er.Terms, want, p.ElectionTerms)
	}
	if er.Violations != 0 || er.Incomplete != 0 || len(er.Errors) != 0 {
		t.Errorf("a round of one leader at a time: %+v", er)
	}
}
