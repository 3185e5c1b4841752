package redlock

// Re-seeding a node that lost its data (see Durability in the package
// documentation). A node votes only while its seed marker says "ok". The
// facts of its re-seeding live on the node, so that any client that meets
// it acts on them, however short-lived: a round that finds a node without
// a marker beside one with a marker writes "p:<since>:<copy>:<due>" on it
// (server times: since is now; copy, settleWindow and the drift later;
// due, the longest TTL and the drift later). The first round that finds
// it at or past copy copies onto it, for every key, the highest counter
// read from a majority of the nodes that have theirs ("ok" or copied),
// and marks it "c:<due>"; the first try from due on marks it "ok" and
// votes. A deployment whose every node answers without a marker is new:
// its nodes are marked "ok" at once (also over a wait marked less than
// markGrace before by a client whose round met the first of those marks);
// until one round hears every node, or one with a marker, an unseeded
// node is left as it is.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// seedBatch is the most counters one seed.lua or peek.lua call carries.
	seedBatch = 256
	// seedTimeout bounds the re-seeding of one node.
	seedTimeout = 30 * time.Second
	// closeSeedWait bounds how long Close lets a re-seeding under way
	// finish before it stops it: a Backend that lives for one lock (a
	// `distlock run`) may be the only one to meet a node when its copy
	// is due.
	closeSeedWait = 2 * time.Second
	// markGrace is how long after a wait was marked a new deployment's
	// "ok" still takes it back: far longer than marking a new
	// deployment's nodes takes (one request per node, in parallel). A
	// Backend paused longer in the middle of it leaves the nodes it had
	// not marked out of the vote for the longest TTL; and nodes that all
	// lose their data within it look like a new deployment to a Backend
	// that never saw it vote, as ones that lose it at once do.
	markGrace = time.Second
)

// copyDelay is how long after a node was found without its data its
// counters may be copied: every token that counted its old counter is
// settled by then (see settleWindow), on nodes that the copy reads.
func copyDelay() time.Duration { return settleWindow + drift(settleWindow) }

// seed acts on what round r found of nodes that lost their data (or are
// new), and reports whether some of them vote from now on.
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
			return markScript.Run(ctx, n, []string{b.marker()}, "new", ceilMillis(markGrace)).Int64()
		})
		for _, x := range res {
			if x.err != nil {
				return false
			}
		}
		return true
	}
	// Without a node that has a marker, an unseeded node may be part of
	// a new deployment whose other nodes did not answer this round:
	// leave it to a round that hears them all. With one, the node lost
	// its data, or the deployment is new and another Backend is marking
	// its nodes "ok" right now (this round saw some of its marks and not
	// yet the others): that Backend's "ok" takes the wait back.
	if len(r.unseeded) > 0 && r.marked > 0 {
		wait := b.cfg.maxTTL + drift(b.cfg.maxTTL)
		each(ctx, b, r.unseeded, cleanupTimeout, func(ctx context.Context, n Node) (int64, error) {
			return markScript.Run(ctx, n, []string{b.marker()}, ceilMillis(copyDelay()), ceilMillis(wait)).Int64()
		})
	}
	sources := slices.Concat(r.normal, r.copied)
	if len(r.due) == 0 || len(sources) < b.maj {
		return false
	}
	counters, ok := b.readCounters(ctx, sources)
	if !ok {
		return false
	}
	voting := false
	for _, i := range r.due {
		if b.writeCounters(ctx, b.nodes[i], r.waitOf[i], counters) {
			voting = true
		}
	}
	return voting
}

// seedLater runs seed in the background, whose report the returned
// channel receives: the caller need not wait for it, and it goes on when
// the caller gives up. Close lets it finish (for closeSeedWait at most);
// after Close, it reports false at once.
func (b *Backend) seedLater(r round) <-chan bool {
	done := make(chan bool, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		done <- false
		return done
	}
	b.seedWG.Add(1)
	go func() {
		defer b.seedWG.Done()
		done <- b.seed(b.seedCtx, r)
	}()
	return done
}

// finishSeeding waits for the re-seeding started by seedLater, for
// closeSeedWait at most, then stops it.
func (b *Backend) finishSeeding() {
	done := make(chan struct{})
	go func() {
		b.seedWG.Wait()
		close(done)
	}()
	t := time.NewTimer(closeSeedWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		b.seedStop()
		<-done
	}
	b.seedStop()
}

// errNotSource is a copy source whose marker changed while its counters
// were read: it lost its data meanwhile.
var errNotSource = errors.New("redlock: the node lost its data while its counters were read")

// readCounters reads every fencing counter of the sources (nodes marked
// "ok" or copied), and returns the highest value of each key, once at
// least a majority was read whole. The source's marker is read before
// its keys are listed and again, atomically, with each batch of
// counters: a source that lost its data during the read (even one
// copied again since) does not count. A copied source that starts to
// vote meanwhile ("c:<due>", then "ok") counts while the read is younger
// than settleWindow (see sameEpisode).
func (b *Backend) readCounters(ctx context.Context, sources []int) (map[string]int64, bool) {
	pattern := globEscape.Replace(b.cfg.prefix) + "{*}" + suffixToken
	res := each(ctx, b, sources, seedTimeout, func(ctx context.Context, n Node) (map[string]int64, error) {
		start := time.Now()
		marker, err := peekScript.Run(ctx, n, []string{b.marker()}).Slice()
		if err != nil {
			return nil, err
		}
		if m, _ := marker[0].(string); m != "ok" && !strings.HasPrefix(m, "c:") {
			return nil, errNotSource
		}
		var keys []string
		it := n.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for first := true; first || len(keys) > 0; first = false {
			batch := keys[:min(seedBatch, len(keys))]
			keys = keys[len(batch):]
			vals, err := peekScript.Run(ctx, n, append([]string{b.marker()}, batch...)).Slice()
			if err != nil {
				return nil, err
			}
			if !sameEpisode(marker[0], vals[0], time.Since(start)) {
				return nil, errNotSource
			}
			for j, key := range batch {
				if s, ok := vals[2*j+2].(string); ok {
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

// sameEpisode reports whether a source whose marker read before when its
// read began, and after a while later (elapsed, by this host's clock,
// from the first request), kept its counters in between. An unchanged
// marker says so (as it did before this check: a node that loses its
// data gets a new wait, whose marker differs, unless it completes that
// wait within the read). So does a copied node that started to vote
// ("c:<due>", then "ok", which acquire.lua writes once due has passed)
// when the read took less than settleWindow: a node that lost its data
// after the first read could not be "ok" again yet, since it votes no
// sooner than its copy, which comes copyDelay (settleWindow and the
// drift, on the node's clock) after the loss was found at the earliest
// (short of every node losing its data, or an operator's mark). Longer
// reads drop it, as any other change.
func sameEpisode(before, after any, elapsed time.Duration) bool {
	if before == after {
		return true
	}
	b, _ := before.(string)
	return strings.HasPrefix(b, "c:") && after == "ok" && elapsed < settleWindow
}

// writeCounters raises node n's counters to counters and, with the last
// batch, marks it copied ("c:<due>", or "ok" when its wait is over), unless
// it is no longer in the wait that started at since: a node that was
// seeded, voted and lost its data again since the round that saw its copy
// due starts a new wait, which counters read for the old one must not cut
// short (they may predate grants it voted for). It reports whether the
// node votes from now on.
func (b *Backend) writeCounters(ctx context.Context, n Node, since int64, counters map[string]int64) bool {
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
		args := []any{last, since}
		for _, key := range batch {
			args = append(args, counters[key])
		}
		res, err := seedScript.Run(ctx, n, append([]string{b.marker()}, batch...), args...).Int64()
		if err != nil || res == copyStale {
			return false
		}
		if last == "1" {
			return res == copyVotes
		}
	}
	return false
}
