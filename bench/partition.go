package bench

// The partitioning measurement: how long a group of package partition
// takes to settle after a member joins and after a member is killed.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/faultproxy"
	pt "github.com/distlock/distlock/partition"
)

// partitionCommand measures the partitioning rows (see TestPartitionRows).
const partitionCommand = "cd bench && go test -run TestPartitionRows -partition all -v ."

// PartitionParams size the partitioning measurement.
type PartitionParams struct {
	Rounds    int           // join and kill trials per row, rows interleaved
	Members   int           // members, the joining one included
	Units     int           // the group's units
	Reconcile time.Duration // partition.WithReconcile
	MinHold   time.Duration // partition.WithMinHold
	TTL       time.Duration // the members' lock TTL (distlock.WithTTL)
	Limit     time.Duration // a trial that has not settled by then fails
	Poll      time.Duration // how often the group's Assignment is read
}

// PartitionFull are the sizes of TestPartitionRows.
var PartitionFull = PartitionParams{Rounds: 5, Members: 4, Units: 16, Reconcile: 250 * time.Millisecond,
	MinHold: time.Second, TTL: 2 * time.Second, Limit: time.Minute, Poll: 5 * time.Millisecond}

// PartitionSmoke are the sizes of the short check.
var PartitionSmoke = PartitionParams{Rounds: 1, Members: 3, Units: 8, Reconcile: 100 * time.Millisecond,
	MinHold: 100 * time.Millisecond, TTL: time.Second, Limit: 30 * time.Second, Poll: 5 * time.Millisecond}

// JoinBound is the package's stated bound for a join to settle: the
// reconcile interval plus its 25% jitter, plus the minimum hold (the time
// to be granted a lock not counted).
func (p PartitionParams) JoinBound() time.Duration { return p.Reconcile*5/4 + p.MinHold }

// KillBound is the package's stated bound for a kill to settle on
// service: the reconcile interval plus its jitter, plus the time a dead
// member's locks last, the TTL or, on ZooKeeper, the session timeout
// (zklock's grants end with the session; see package partition).
func (p PartitionParams) KillBound(service string) time.Duration {
	lapse := p.TTL
	if service == SvcZK {
		lapse = zkSessionTimeout
	}
	return p.Reconcile*5/4 + lapse
}

// PartitionResult is the partitioning measurement of one distlock row.
type PartitionResult struct {
	Join []time.Duration // join to settled, per trial
	Kill []time.Duration // kill to settled, per trial
	// NoKill, when not empty, says why the row has no kill trial.
	NoKill string
}

// noKill says why a member of s cannot be killed by cutting its
// connections, or "".
func noKill(s Subject) string {
	switch s.ID {
	case "distlock-memlock":
		return "an in-process service: no connection to cut"
	case "distlock-file":
		return "no connection: the kernel frees a dead process's flocks at once"
	case "distlock-pg":
		return "session mode: a session cut off keeps its locks until the server's TCP keepalive ends it (a dead process's session ends at once)"
	}
	return ""
}

// proxies route an Env's addresses through fault proxies while a killable
// instance is opened (Env.route), and cut them all at once.
type proxies struct {
	mu sync.Mutex
	by map[string]*faultproxy.Proxy
}

func (ps *proxies) route(addr string) (string, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.by[addr]; ok {
		return p.Addr(), nil
	}
	p, err := faultproxy.New(addr)
	if err != nil {
		return "", err
	}
	if ps.by == nil {
		ps.by = map[string]*faultproxy.Proxy{}
	}
	ps.by[addr] = p
	return p.Addr(), nil
}

func (ps *proxies) each(f func(*faultproxy.Proxy)) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.by {
		f(p)
	}
}

// member is one member of a row's group: its instance, Client and Run.
type member struct {
	l      Locker
	c      *distlock.Client
	p      *pt.Partition
	ctx    context.Context // its Run's
	cancel context.CancelFunc
	done   chan error
	ran    bool     // run was started
	via    *proxies // the killable member's
}

// partition measures, per distlock row of subs, the time for a group to
// settle after a member joins and after that member is killed (its
// connections to the service blackholed; its locks lapse by TTL), rows
// taking turns trial by trial in a rotating order.
func (r *Runner) partition(ctx context.Context, subs []Subject, pp PartitionParams) map[string]*PartitionResult {
	type row struct {
		s       Subject
		group   string
		members []*member // the ones that stay
	}
	out := map[string]*PartitionResult{}
	var rows []*row
	defer func() {
		for _, x := range rows {
			for _, m := range x.members {
				r.stopMember(x.s, m)
			}
		}
	}()
	for _, s := range subs {
		out[s.ID] = &PartitionResult{NoKill: noKill(s)}
		x := &row{s: s, group: "bench-" + s.ID}
		rows = append(rows, x)
		for i := range pp.Members - 1 {
			x.members = append(x.members, r.startMember(ctx, s, x.group, fmt.Sprintf("m%d", i), pp, false))
			x.members[i].ran = true
			go x.members[i].run()
		}
		if _, err := r.settled(ctx, x.members[0].p, pp.Members-1, time.Now(), pp); err != nil {
			r.tb.Fatalf("%s: partition: the first members did not settle: %v", s.Name, err)
		}
	}
	for round := range pp.Rounds {
		for i := range rows {
			x := rows[(round+i)%len(rows)]
			pr := out[x.s.ID]
			killable := pr.NoKill == ""
			j := r.startMember(ctx, x.s, x.group, fmt.Sprintf("j%d", round), pp, killable)
			t0 := time.Now()
			j.ran = true
			go j.run()
			d, err := r.settled(ctx, x.members[0].p, pp.Members, t0, pp)
			if err != nil {
				r.stopMember(x.s, j)
				r.tb.Fatalf("%s: partition: after a join: %v", x.s.Name, err)
			}
			pr.Join = append(pr.Join, d)
			if killable {
				j.via.each((*faultproxy.Proxy).Blackhole)
				t0 = time.Now()
				j.cancel() // what it sends now is lost
				d, err = r.settled(ctx, x.members[0].p, pp.Members-1, t0, pp)
				if err != nil {
					r.stopMember(x.s, j)
					r.tb.Fatalf("%s: partition: after a kill: %v", x.s.Name, err)
				}
				pr.Kill = append(pr.Kill, d)
				j.via.each((*faultproxy.Proxy).Heal)
			}
			r.stopMember(x.s, j)
			if !killable {
				// The member left gracefully: wait for the group to settle
				// without it before the next trial.
				if _, err := r.settled(ctx, x.members[0].p, pp.Members-1, time.Now(), pp); err != nil {
					r.tb.Fatalf("%s: partition: after a leave: %v", x.s.Name, err)
				}
			}
		}
		r.logf("partitioning: round %d/%d done", round+1, pp.Rounds)
	}
	return out
}

// startMember opens an instance of s (through proxies when killable), a
// Client over its backend with pp's TTL, and the member id of group over
// it; run starts it.
func (r *Runner) startMember(ctx context.Context, s Subject, group, id string, pp PartitionParams, killable bool) *member {
	r.tb.Helper()
	m := &member{done: make(chan error, 1)}
	if killable {
		m.via = &proxies{}
		r.env.via = m.via.route
	}
	l, err := s.Open(r.env)
	r.env.via = nil
	if err != nil {
		r.tb.Fatalf("%s: open: %v", s.Name, err)
	}
	m.l = l
	d, ok := l.(*distlockLocker)
	if !ok || d.b == nil {
		r.closeLocker(s, l)
		r.tb.Fatalf("%s: partition: not a distlock Client over a backend", s.Name)
	}
	if m.c, err = distlock.New(d.b, distlock.WithTTL(pp.TTL)); err != nil {
		r.closeLocker(s, l)
		r.tb.Fatalf("%s: partition: %v", s.Name, err)
	}
	all := pt.Count(pp.Units)
	if m.p, err = pt.New(m.c, group, all, pt.WithMember(id), pt.WithReconcile(pp.Reconcile), pt.WithMinHold(pp.MinHold)); err != nil {
		r.closeLocker(s, l)
		r.tb.Fatalf("%s: partition: %v", s.Name, err)
	}
	m.ctx, m.cancel = context.WithCancel(ctx)
	return m
}

// run runs the member until its context ends.
func (m *member) run() {
	m.done <- m.p.Run(m.ctx, func(ctx context.Context, _ pt.Unit) error {
		<-ctx.Done()
		return nil
	})
}

// stopMember ends m's Run, heals its proxies and closes its Client and
// instance.
func (r *Runner) stopMember(s Subject, m *member) {
	m.cancel()
	if m.via != nil {
		m.via.each((*faultproxy.Proxy).Heal)
	}
	done := m.done
	if !m.ran {
		done = make(chan error, 1)
		done <- nil
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			r.tb.Errorf("%s: partition.Run: %v", s.Name, err)
		}
	case <-time.After(time.Minute):
		r.tb.Errorf("%s: partition.Run did not return within a minute of its end", s.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.c.Close(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
		r.tb.Logf("%s: partition: close: %v", s.Name, err)
	}
	r.closeLocker(s, m.l)
	if m.via != nil {
		m.via.each((*faultproxy.Proxy).Close)
	}
}

// settled waits until the group read through p has n members and every
// unit is held by its planned member, and returns the time since t0.
func (r *Runner) settled(ctx context.Context, p *pt.Partition, n int, t0 time.Time, pp PartitionParams) (time.Duration, error) {
	deadline := t0.Add(pp.Limit)
	var last pt.Assignment
	var lastErr error
	for {
		a, err := p.Assignment(ctx)
		at := time.Now()
		if err == nil && len(a.Members) == n && a.Settled() {
			return at.Sub(t0), nil
		}
		last, lastErr = a, err
		if at.After(deadline) {
			return 0, fmt.Errorf("not settled within %v: %d members, %s (last error: %v)", pp.Limit, len(last.Members), describe(last), lastErr)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pp.Poll):
		}
	}
}

// describe says how far an assignment is from settled.
func describe(a pt.Assignment) string {
	var off []string
	for _, u := range a.Units {
		if !u.Held || u.Owner != u.Planned {
			off = append(off, fmt.Sprintf("%s held by %q planned %q", u.Name, u.Owner, u.Planned))
		}
	}
	return fmt.Sprintf("%d units unsettled: %s", len(off), strings.Join(off, "; "))
}

// routeURL routes the host of a URL (scheme://host:port...) through via.
func routeURL(raw string, via func(string) (string, error)) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	h, err := via(u.Host)
	if err != nil {
		return "", err
	}
	u.Host = h
	return u.String(), nil
}

// partitionTable renders the measurement as a Markdown table: per row,
// the median and the worst settle time after a join and after a kill, and
// each as a ratio of the package's bound.
func partitionTable(subs []Subject, res map[string]*PartitionResult, pp PartitionParams) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| service | row | join p50 | join max | join p50, max / bound (%s) | kill p50 | kill max | kill p50, max / bound |\n|---|---|---|---|---|---|---|---|\n",
		fmtDur(pp.JoinBound()))
	for _, s := range subs {
		pr := res[s.ID]
		if pr == nil {
			continue
		}
		join := slices.Sorted(slices.Values(pr.Join))
		kill := "| " + pr.NoKill + " | | |"
		if pr.NoKill == "" {
			k := slices.Sorted(slices.Values(pr.Kill))
			bound := pp.KillBound(s.Service)
			kill = fmt.Sprintf("| %s | %s | %s, %s (%s) |", fmtDur(median(k)), fmtDur(last(k)),
				sig3(float64(median(k))/float64(bound)), sig3(float64(last(k))/float64(bound)), fmtDur(bound))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s, %s %s\n", s.Service, s.Name, fmtDur(median(join)), fmtDur(last(join)),
			sig3(float64(median(join))/float64(pp.JoinBound())), sig3(float64(last(join))/float64(pp.JoinBound())), kill)
	}
	return b.String()
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[(len(ds)-1)/2]
}

func last(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)-1]
}
