package redislock

// RefreshAll: the watchdog's batched refresh of many leases in one
// pipeline.

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

// refreshBatch is the most leases refresh_many.lua refreshes in one call:
// a call of that size keeps the server busy for about a millisecond.
const refreshBatch = 256

// RefreshAll implements driver.BatchRefresher: it refreshes every lease
// in one pipeline (one round trip on a single server; one per node that
// holds some of the keys on a Cluster). Over a *redis.Client (a single
// server, or a Sentinel-managed primary) one script call refreshes up to
// 256 leases; on a Cluster, whose lock keys lie in different slots, each
// lease is one call. Permits (see AcquirePermit) are refreshed in the
// same pipeline, one script call each, and so are shared grants (see
// AcquireShared).
func (b *Backend) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	res := make([]driver.RefreshResult, len(leases))
	if err := driver.CheckTTL(ttl); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	ls := make([]*lease, len(leases))
	var all, shared []int
	var permits *permitRefreshes // nil when there are none
	for i, dl := range leases {
		l, ok := dl.(*lease)
		if !ok || l.b != b {
			if p, ok := dl.(*permit); ok && p.a.b == b {
				if permits == nil {
					permits = &permitRefreshes{}
				}
				permits.ps, permits.idx = append(permits.ps, p), append(permits.idx, i)
				continue
			}
			res[i].Err = fmt.Errorf("%w: redislock: lease %T is not from this backend", driver.ErrInvalidOption, dl)
			continue
		}
		ls[i] = l
		if l.shared {
			shared = append(shared, i)
			continue
		}
		all = append(all, i)
	}
	if len(all) == 0 && len(shared) == 0 && permits == nil {
		return res
	}
	size := 1
	if _, ok := b.client.(*redis.Client); ok && !b.noBatch.Load() {
		size = refreshBatch
	}
	var groups []*refreshGroup
	for len(all) > 0 {
		n := min(size, len(all))
		groups = append(groups, &refreshGroup{idx: all[:n:n]})
		all = all[n:]
	}
	for _, i := range shared {
		groups = append(groups, &refreshGroup{idx: []int{i}, shared: true})
	}
	sent := time.Now()
	b.runRefresh(ctx, ls, groups, permits, ttl)
	if permits != nil {
		permits.results(ctx, sent, ttl, res)
	}
	if size > 1 {
		// A server in cluster mode refuses keys of different slots in one
		// call even when it holds them all: refresh those one by one, now
		// and from now on.
		var split []*refreshGroup
		for _, g := range groups {
			if len(g.idx) > 1 && redis.HasErrorPrefix(g.cmd.Err(), "CROSSSLOT") {
				b.noBatch.Store(true)
				for _, i := range g.idx {
					split = append(split, &refreshGroup{idx: []int{i}})
				}
				g.idx = nil
			}
		}
		if len(split) > 0 {
			b.runRefresh(ctx, ls, split, nil, ttl)
			groups = append(groups, split...)
		}
	}
	for _, g := range groups {
		if len(g.idx) == 0 { // split above
			continue
		}
		if len(g.idx) == 1 {
			n, err := g.cmd.Int64()
			res[g.idx[0]].Validity, res[g.idx[0]].Err = ls[g.idx[0]].refreshed(ctx, sent, ttl, n, err)
			continue
		}
		vals, err := g.cmd.Int64Slice()
		if err == nil && len(vals) != len(g.idx) {
			err = fmt.Errorf("redislock: %d results for %d leases", len(vals), len(g.idx))
		}
		for j, i := range g.idx {
			var n int64
			if err == nil {
				n = vals[j]
			}
			res[i].Validity, res[i].Err = ls[i].refreshed(ctx, sent, ttl, n, err)
		}
	}
	return res
}

// refreshGroup is the leases (indexes) refreshed by one script call.
type refreshGroup struct {
	idx    []int
	cmd    *redis.Cmd
	shared bool // a shared grant's, by shared_refresh.lua
}

// runRefresh sends one script call per group, and one per permit of ps
// (nil for none), in one pipeline, and sends again with EVAL the calls
// that met a server without the script.
func (b *Backend) runRefresh(ctx context.Context, ls []*lease, groups []*refreshGroup, ps *permitRefreshes, ttl time.Duration) {
	send := func(eval bool, gs []*refreshGroup) {
		pipe := b.client.Pipeline()
		ps.queue(ctx, pipe, ttl, eval)
		for _, g := range gs {
			script := refreshScript()
			var keys []string
			var args []any
			if g.shared {
				l := ls[g.idx[0]]
				script = sharedRefresh().Script
				keys, args = []string{l.k.readers, l.k.grants}, []any{l.args.held, ceilMillis(ttl)}
			} else if len(g.idx) == 1 {
				l := ls[g.idx[0]]
				// The secret, a *redact.Secret as in every script call, stays
				// out of what a command-logging hook shows.
				keys, args = []string{l.k.lock}, []any{&l.k.secret, ceilMillis(ttl)}
			} else {
				script = refreshMany()
				keys, args = make([]string, 0, len(g.idx)), make([]any, 0, len(g.idx)+1)
				for _, i := range g.idx {
					keys, args = append(keys, ls[i].k.lock), append(args, &ls[i].k.secret)
				}
				args = append(args, ceilMillis(ttl))
			}
			if eval {
				g.cmd = script.Eval(ctx, pipe, keys, args...)
			} else {
				g.cmd = script.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx)
	}
	send(false, groups)
	var again []*refreshGroup
	for _, g := range groups {
		if isNoScript(g.cmd.Err()) {
			again = append(again, g)
		}
	}
	if permitsAgain := ps.noScript(); len(again) > 0 || permitsAgain {
		send(true, again)
	}
}
