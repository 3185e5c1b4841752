package redlock

// Re-seeding a node that lost its data (see Durability in the package
// documentation). A node votes only while its seed marker says "ok". A
// node without a marker restarted empty (or is new): a round that meets it
// with nodes that vote has it write, a few seconds later (markGrace),
// "p:<t>", t being the node's clock plus the longest TTL
// (WithMaxTTL) and the drift, so that every grant it held has expired
// and every token that counted it has been handed out or abandoned by
// then. The first round that meets it after t copies onto it, for every
// key, the highest counter read from a majority of the other nodes, and
// marks it "ok". A deployment whose every node answers without a marker
// is new: its nodes are marked "ok" at once; until one round hears every
// node, or one that votes, an unseeded node is left as it is.

import (
	"context"
	"strconv"
	"time"
)

const (
	// seedBatch is the most counters one seed.lua or peek.lua call carries.
	seedBatch = 256
	// seedTimeout bounds the re-seeding of one node.
	seedTimeout = 30 * time.Second
)

// seed acts on the nodes of round r that have no marker or whose wait is
// over, and reports whether some of them may now vote.
func (b *Backend) seed(ctx context.Context, r round) bool {
	if !b.seeding.TryLock() {
		return false // another goroutine of this Backend is at it
	}
	defer b.seeding.Unlock()
	ctx, cancel := context.WithTimeout(ctx, seedTimeout)
	defer cancel()
	// Every node without a marker: a new deployment, unless this Backend
	// has seen it vote (then every node lost its data: see Durability).
	if len(r.unseeded) == len(b.nodes) && !b.sawVoting.Load() {
		res := each(ctx, b, r.unseeded, cleanupTimeout, func(ctx context.Context, n Node) (int64, error) {
			return markScript.Run(ctx, n, []string{b.marker()}, 0).Int64()
		})
		for _, x := range res {
			if x.err != nil {
				return false
			}
		}
		return true
	}
	// Without a node that shows the deployment exists (one that votes),
	// an unseeded node may be part of a new deployment whose other nodes
	// did not answer this round: leave it to a round that hears them all.
	// With one, the node lost its data, or the deployment is new and
	// another Backend is marking its nodes "ok" right now (this round saw
	// some of its marks and not yet the others): its wait is marked only
	// later (see markLater), so that such a mark lands first.
	if len(r.unseeded) > 0 && len(r.normal) > 0 {
		b.markLater(r.unseeded)
	}
	if len(r.due) == 0 || len(r.normal) < b.maj {
		return false
	}
	counters, ok := b.readCounters(ctx, r.normal)
	if !ok {
		return false
	}
	seeded := false
	for _, i := range r.due {
		if b.writeCounters(ctx, b.nodes[i], r.waitEnd[i], counters) {
			seeded = true
		}
	}
	return seeded
}

// markGrace is how long markLater waits before it marks a wait: far
// longer than a new deployment's marking of its nodes "ok" takes (one
// request per node, in parallel). A Backend paused longer in the middle
// of it leaves the nodes it had not marked out of the vote for the
// longest TTL, as before the grace; and nodes that all lose their data
// within it look like a new deployment to a Backend that never saw it
// vote, as ones that lose it at once do.
var markGrace = time.Second

// markedLater, if not nil, is called when a markLater is over (for tests).
var markedLater func()

// markLater starts, after markGrace, the wait of each node of unseeded
// that has no marker by then. A node without a marker never votes, so
// waiting longer to start its wait only delays its vote. Marked at once,
// a node of a new deployment whose "ok" another Backend is still writing
// would wait the longest TTL for nothing, and with a majority of them the
// key could not be granted for that long. One mark per node is pending at
// a time.
func (b *Backend) markLater(unseeded []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.marking == nil {
		b.marking = make([]bool, len(b.nodes))
	}
	var idx []int
	for _, i := range unseeded {
		if !b.marking[i] {
			b.marking[i] = true
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			b.mu.Lock()
			for _, i := range idx {
				b.marking[i] = false
			}
			b.mu.Unlock()
			if markedLater != nil {
				markedLater()
			}
		}()
		t := time.NewTimer(markGrace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-b.closing.Done():
			return
		}
		wait := b.cfg.maxTTL + drift(b.cfg.maxTTL)
		each(b.closing, b, idx, cleanupTimeout, func(ctx context.Context, n Node) (int64, error) {
			return markScript.Run(ctx, n, []string{b.marker()}, ceilMillis(wait)).Int64()
		})
	}()
}

// seedLater runs seed in the background, for a round that was granted
// without the nodes that need it: the holder does not wait for it.
func (b *Backend) seedLater(r round) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.seed(b.closing, r)
	}()
}

// readCounters reads every fencing counter of the sources, and returns the
// highest value of each key, once at least a majority was read whole.
func (b *Backend) readCounters(ctx context.Context, sources []int) (map[string]int64, bool) {
	pattern := globEscape.Replace(b.cfg.prefix) + "{*}" + suffixToken
	res := each(ctx, b, sources, seedTimeout, func(ctx context.Context, n Node) (map[string]int64, error) {
		var keys []string
		it := n.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for len(keys) > 0 {
			batch := keys[:min(seedBatch, len(keys))]
			keys = keys[len(batch):]
			vals, err := peekScript.Run(ctx, n, batch).Slice()
			if err != nil {
				return nil, err
			}
			for j, key := range batch {
				if s, ok := vals[2*j].(string); ok {
					if v, err := strconv.ParseInt(s, 10, 64); err == nil {
						out[key] = v
					}
				}
			}
		}
		return out, nil
	})
	highest := map[string]int64{}
	read := 0
	for _, i := range sources {
		if res[i].err != nil {
			continue
		}
		read++
		for key, v := range res[i].val {
			highest[key] = max(highest[key], v)
		}
	}
	return highest, read >= b.maj
}

// writeCounters raises node n's counters to counters and marks it "ok" with
// the last batch, unless it is no longer in the wait that ends at waitEnd:
// a node that was seeded, voted and lost its data again since the round
// that saw it due starts a new wait, which counters read for the old one
// must not cut short (they may predate grants it voted for).
func (b *Backend) writeCounters(ctx context.Context, n Node, waitEnd int64, counters map[string]int64) bool {
	keys := make([]string, 0, len(counters))
	for key := range counters {
		keys = append(keys, key)
	}
	for first := true; first || len(keys) > 0; first = false {
		batch := keys[:min(seedBatch, len(keys))]
		keys = keys[len(batch):]
		last := "0"
		if len(keys) == 0 {
			last = "1"
		}
		args := []any{last, waitEnd}
		for _, key := range batch {
			args = append(args, counters[key])
		}
		ok, err := seedScript.Run(ctx, n, append([]string{b.marker()}, batch...), args...).Int64()
		if err != nil || ok != 1 {
			return false
		}
	}
	return true
}
