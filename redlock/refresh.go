package redlock

// RefreshAll: the renewal of many grants together, one request per node
// for up to refreshBatch grants.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

var _ driver.BatchRefresher = (*Backend)(nil)

const (
	// refreshBatch is the most grants refresh_many.lua refreshes in one
	// call: a call of that size keeps a node busy for about a millisecond.
	refreshBatch = 256
	// refreshParallel is the most refresh.lua calls on their way to one
	// node at once, for a client that is not a *redis.Client.
	refreshParallel = 16
)

// RefreshAll implements driver.BatchRefresher: it refreshes every lease
// on every node in parallel, one refresh_many.lua call per node for up
// to 256 leases (so 100 leases cost one request per node, where Refresh
// costs one per lease and node). Each lease counts as Refresh counts it:
// refreshed when a majority of the nodes extended it with validity left
// (ttl less the time since the requests were sent and the drift), lost
// (distlock.ErrLockLost) when a majority no longer holds it, and
// otherwise distlock.ErrUnavailable naming the nodes that did not answer.
// A node whose client is not a *redis.Client (a Cluster's, whose lock
// keys lie in different slots) gets one refresh.lua call per lease, up
// to 16 of them on their way at once. RefreshAll waits for every node,
// each within the per-node timeout of ttl. A lease not from this Backend gets an error matching
// distlock.ErrInvalidOption.
func (b *Backend) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	out := make([]driver.RefreshResult, len(leases))
	err := driver.CheckTTL(ttl)
	if err == nil {
		err = b.cfg.checkTTL(ttl)
	}
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	var ls []*lease
	var idx []int // ls[j] is leases[idx[j]]
	for i, dl := range leases {
		l, ok := dl.(*lease)
		if !ok || l == nil || l.b != b {
			out[i].Err = fmt.Errorf("%w: redlock: lease %T is not from this backend", driver.ErrInvalidOption, dl)
			continue
		}
		ls, idx = append(ls, l), append(idx, i)
	}
	if len(ls) == 0 {
		return out
	}
	ms := ceilMillis(ttl)
	sent := time.Now()
	// byNode[n][j] is node n's reply for ls[j].
	byNode := each(ctx, b, nil, b.cfg.timeoutFor(ttl), func(ctx context.Context, n Node) ([]reply[int64], error) {
		return refreshMany(ctx, n, ls, ms), nil
	})
	answered := make([]bool, len(b.nodes))
	for i := range answered {
		answered[i] = true
	}
	res := make([]reply[int64], len(b.nodes))
	for j, l := range ls {
		for n := range b.nodes {
			r := byNode[n].val[j]
			res[n] = reply[int64]{r.val, classify(ctx, r.err)}
		}
		out[idx[j]].Validity, out[idx[j]].Err = l.refreshed(ctx, sent, ttl, res, answered)
	}
	return out
}

// refreshMany refreshes the grants ls on node n to ms milliseconds and
// returns its reply for each: refresh_many.lua over a *redis.Client, in
// calls of up to refreshBatch grants one after the other, and refresh.lua
// once per grant over any other client, refreshParallel calls at a time
// (so that the grants late in ls are not left to the end of the timeout).
func refreshMany(ctx context.Context, n Node, ls []*lease, ms int64) []reply[int64] {
	out := make([]reply[int64], len(ls))
	if _, ok := n.(*redis.Client); !ok {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(refreshParallel, len(ls)) {
			wg.Go(func() {
				for j := int(next.Add(1) - 1); j < len(ls); j = int(next.Add(1) - 1) {
					l := ls[j]
					v, err := refreshScript.Run(ctx, n, []string{l.k.lock}, &l.c.secret, ms).Int64()
					out[j] = reply[int64]{v, err}
				}
			})
		}
		wg.Wait()
		return out
	}
	for start := 0; start < len(ls); start += refreshBatch {
		batch := ls[start:min(start+refreshBatch, len(ls))]
		keys := make([]string, len(batch))
		args := make([]any, len(batch)+1)
		for j, l := range batch {
			keys[j], args[j] = l.k.lock, &l.c.secret
		}
		args[len(batch)] = ms
		vals, err := refreshManyScript.Run(ctx, n, keys, args...).Int64Slice()
		if err == nil && len(vals) != len(batch) {
			err = fmt.Errorf("redlock: %d refresh replies for %d grants", len(vals), len(batch))
		}
		for j := range batch {
			if err != nil {
				out[start+j].err = err
			} else {
				out[start+j].val = vals[j]
			}
		}
	}
	return out
}
