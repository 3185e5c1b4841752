package bench

// The election measurement: the time from a leader's resignation to the
// next leader's term, distlock's package election against etcd's
// concurrency.Election.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock/election"
)

// Elector is one candidate of a library's elections, standing for one
// process: its own clients and connections. Campaign blocks until value is
// elected in the election name (or ctx ends), and returns the function
// that resigns.
type Elector interface {
	Campaign(ctx context.Context, name, value string) (Unlock, error)
	Close() error
}

// ElectionResult is the election measurement of one subject.
type ElectionResult struct {
	Candidates int
	Terms      int             // terms in all rounds, each candidate's last of a round too
	Handoffs   int             // terms that followed another candidate's
	Gaps       []time.Duration // a resignation's start to the next candidate's Campaign return, sorted
	Violations int             // terms that began before the term before them was resigned
	Incomplete int             // rounds stopped at ContentionLimit
	Errors     []string        // unexpected errors (at most a few)
}

// etcdElectionSubject is etcd's own election recipe, the peer of the
// distlock election rows.
var etcdElectionSubject = Subject{
	ID: "etcd-election", Name: "etcd concurrency.Election", Service: SvcEtcd, Kind: KindPeer,
	Settings: "clientv3 v3.7.3; one Session per candidate (default TTL 60s); Election.Campaign/Resign",
	Measures: Election,
	Elect:    openEtcdElector,
	Counters: etcdCounters,
}

type etcdElector struct {
	s     *concurrency.Session
	close func() error
}

func openEtcdElector(e *Env) (Elector, error) {
	cli, err := e.EtcdClient(e.Etcd())
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdElector{s: s, close: func() error { return errors.Join(s.Close(), cli.Close()) }}, nil
}

func (el *etcdElector) Campaign(ctx context.Context, name, value string) (Unlock, error) {
	e := concurrency.NewElection(el.s, name)
	if err := e.Campaign(ctx, value); err != nil {
		return nil, err
	}
	return e.Resign, nil
}

func (el *etcdElector) Close() error { return el.close() }

// distlockElector is package election over the Client of a distlock row.
type distlockElector struct{ d *distlockLocker }

func (el distlockElector) Campaign(ctx context.Context, name, value string) (Unlock, error) {
	e, err := election.New(el.d.c, name)
	if err != nil {
		return nil, err
	}
	t, err := e.Campaign(ctx, value)
	if err != nil {
		return nil, err
	}
	return t.Resign, nil
}

func (el distlockElector) Close() error { return el.d.Close() }

// openElector starts one candidate of s: its Elect, or, for a distlock
// row, package election over the Client its Open returns.
func (r *Runner) openElector(s Subject) Elector {
	r.tb.Helper()
	if s.Elect != nil {
		el, err := s.Elect(r.env)
		if err != nil {
			r.tb.Fatalf("%s: open: %v", s.Name, err)
		}
		return el
	}
	l := r.open(s)
	d, ok := l.(*distlockLocker)
	if !ok {
		r.closeLocker(s, l)
		r.tb.Fatalf("%s: takes part in elections without an Elect, and is not a distlock Client", s.Name)
	}
	return distlockElector{d}
}

// elections measures, per subject, ElectionCandidates candidates (each an
// instance of its own, as processes would be) taking terms in one
// election: each leads for Hold, resigns and campaigns again at once,
// until ElectionTerms terms have begun. The others wait in Campaign
// meanwhile, so each resignation meets a waiting candidate.
func (r *Runner) elections(ctx context.Context) map[string]*ElectionResult {
	subs := r.with(Election)
	out := map[string]*ElectionResult{}
	for _, s := range subs {
		out[s.ID] = &ElectionResult{Candidates: r.p.ElectionCandidates}
	}
	for round := range r.p.Rounds {
		for _, s := range rotated(subs, round) {
			r.electionRound(ctx, s, round, out[s.ID])
		}
		r.logf("elections: round %d/%d done", round+1, r.p.Rounds)
	}
	for _, er := range out {
		slices.Sort(er.Gaps)
	}
	return out
}

// term is one term of the election measurement.
type term struct {
	g       int       // the candidate
	elected time.Time // when its Campaign returned
	resign  time.Time // when its Resign was called
}

func (r *Runner) electionRound(ctx context.Context, s Subject, round int, er *ElectionResult) {
	n := r.p.ElectionCandidates
	els := make([]Elector, n)
	for i := range els {
		els[i] = r.openElector(s)
	}
	defer func() {
		for _, el := range els {
			if err := el.Close(); err != nil {
				r.tb.Errorf("%s: close: %v", s.Name, err)
			}
		}
	}()
	// Connections and sessions are made before the measured terms: a
	// process that starts pays for them once, not per term.
	err := parallel(16, n, func(i int) error {
		u, err := els[i].Campaign(ctx, keyFor(s, "warm-election/"+strconv.Itoa(i)), "warm")
		if err == nil {
			err = u(ctx)
		}
		return err
	})
	if err != nil {
		r.tb.Fatalf("%s: warm-up: %v", s.Name, err)
	}
	name := keyFor(s, "election/"+strconv.Itoa(round))
	runCtx, cancel := context.WithTimeout(ctx, r.p.ContentionLimit)
	defer cancel()
	var (
		begun atomic.Int64
		mu    sync.Mutex
		terms []term
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(er.Errors) < 3 {
			er.Errors = append(er.Errors, err.Error())
		}
	}
	var wg sync.WaitGroup
	for i, el := range els {
		wg.Go(func() {
			for {
				resign, err := el.Campaign(runCtx, name, "candidate "+strconv.Itoa(i))
				elected := time.Now()
				if err != nil {
					if runCtx.Err() == nil {
						fail(fmt.Errorf("campaign: %w", err))
					}
					return
				}
				last := begun.Add(1) > int64(r.p.ElectionTerms)
				if !last {
					time.Sleep(r.p.Hold)
				}
				at := time.Now()
				if err := resign(ctx); err != nil {
					fail(fmt.Errorf("resign: %w", err))
					return
				}
				// Every term is recorded, a candidate's last too: the
				// check of two leaders at once covers the round's final
				// hand-offs.
				mu.Lock()
				terms = append(terms, term{g: i, elected: elected, resign: at})
				mu.Unlock()
				if last { // enough terms: hand over to the next, and stop
					return
				}
			}
		})
	}
	wg.Wait()
	if runCtx.Err() != nil {
		er.Incomplete++
	}
	slices.SortFunc(terms, func(a, b term) int { return a.elected.Compare(b.elected) })
	er.Terms += len(terms)
	for k := 1; k < len(terms); k++ {
		prev, t := terms[k-1], terms[k]
		switch {
		case t.elected.Before(prev.resign):
			er.Violations++
		case t.g != prev.g:
			er.Handoffs++
			er.Gaps = append(er.Gaps, t.elected.Sub(prev.resign))
		}
	}
}

func (rp *Report) electionP50(id string) float64 {
	if er := rp.Res.Election[id]; er != nil && len(er.Gaps) > 0 {
		return float64(quantile(er.Gaps, 0.5))
	}
	return 0
}

func (rp *Report) writeElection(pf func(string, ...any), section int) {
	p := rp.Res.Params
	pf("## %d. Elections: from a resignation to the next leader's term\n\n", section)
	pf("%d candidates per subject, each an instance of its own (a process), in one election: each leads for %s, resigns and campaigns again at once, %d terms per subject and round (%d rounds, the subjects taking turns). The time is from the leader's call to resign to the return of the next leader's Campaign (distlock: `election.Term.Resign` to `election.Election.Campaign`; etcd: `concurrency.Election.Resign` to `Campaign`), for terms that passed to another candidate. A distlock row is package election over that row's Client.\n\n",
		p.ElectionCandidates, p.Hold, p.ElectionTerms, p.Rounds)
	pf("| service | subject | hand-offs | p50 | p99 | mean | two leaders at once |\n|---|---|---|---|---|---|---|\n")
	for _, s := range rp.Subjects {
		er := rp.Res.Election[s.ID]
		if er == nil {
			continue
		}
		pf("| %s | %s | %d | %s | %s | %s | %d |\n", s.Service, s.Name, er.Handoffs,
			fmtDur(quantile(er.Gaps, 0.5)), fmtDur(quantile(er.Gaps, 0.99)), fmtDur(mean(er.Gaps)), er.Violations)
	}
	pf("\n")
	rp.writeComparisons(pf, Election, "p50 resignation to next term", rp.electionP50, fmtDurF, true)
}
