package redlock

// List: the locks held under a prefix, for distlock status.

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// minStraggle is the least time a listing waits for the nodes that did
// not answer when a majority had.
const minStraggle = 100 * time.Millisecond

// listStraggle is how long a listing waits for the other nodes once a
// majority answered, which took elapsed, when their answers cannot change
// which keys are listed: as long again (a node with as many keys takes
// about as long), and at least minStraggle.
func listStraggle(elapsed time.Duration) time.Duration { return max(elapsed, minStraggle) }

// listDecided reports whether the nodes that answered (out, by answered)
// decide which keys a listing shows, whatever the others say: no grant
// seen on fewer than maj nodes could reach maj with the nodes that have
// not answered yet. A grant held on exactly a majority, one of whose
// nodes is slow, is then waited for, not dropped.
func listDecided(maj int) func(out []reply[[]nodeGrant], answered []bool) bool {
	return func(out []reply[[]nodeGrant], answered []bool) bool {
		pending := 0
		seen := map[[2]string]int{}
		for i, r := range out {
			switch {
			case !answered[i]:
				pending++
			case r.err == nil:
				for _, g := range r.val {
					seen[[2]string{g.key, g.id}]++
				}
			}
		}
		for _, n := range seen {
			if n < maj && n+pending >= maj {
				return false
			}
		}
		return true
	}
}

// nodeGrant is one node's lock value for a key. id tells grants apart:
// the SHA-1 of the grant's secret, which peek.lua returns in place of the
// secret (the same on every node of the grant).
type nodeGrant struct {
	key, id, owner string
	token          uint64
	since          time.Time
	pttl           time.Duration
}

// List implements driver.Lister: it reads the lock keys under prefix on
// every node in parallel, and lists a key as held when a majority of the
// nodes hold one grant of it. Token is the grant's token (the highest its
// nodes record), Since the earliest of its nodes' clocks at the grant,
// Expires this host's clock plus the time a majority still holds it. The
// listing is not a snapshot, and List fails when fewer than a majority
// of the nodes answer. Once a majority answered, List waits for the
// other nodes as long as their answers may decide whether a key is
// listed (a grant that the nodes that answered hold on fewer than a
// majority, but on a majority with the others), up to the request timeout
// (5s unless WithRequestTimeout fixes it) or ctx's end; otherwise only as
// long again as the majority took, at least 100ms, so that a paused node
// does not hold it. Nodes it stops waiting for are left out.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	pattern := globEscape.Replace(b.cfg.prefix+"{"+tagEscaper(prefix)) + "*}" + suffixLock
	now := time.Now()
	q := quorum[[]nodeGrant]{straggle: listStraggle, decided: listDecided(b.maj)}
	res := eachQuorum(ctx, b, b.cfg.listTimeout(), q, func(ctx context.Context, n Node) ([]nodeGrant, error) {
		var rkeys []string
		it := n.Scan(ctx, 0, pattern, scanCount).Iterator()
		for it.Next(ctx) {
			rkeys = append(rkeys, it.Val())
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		slices.Sort(rkeys)
		rkeys = slices.Compact(rkeys)
		var out []nodeGrant
		for len(rkeys) > 0 {
			batch := rkeys[:min(seedBatch, len(rkeys))]
			rkeys = rkeys[len(batch):]
			gs, err := b.peekGrants(ctx, n, batch)
			if err != nil {
				return nil, err
			}
			for _, g := range gs {
				if strings.HasPrefix(g.key, prefix) {
					out = append(out, g)
				}
			}
		}
		return out, nil
	})
	hs, err := b.majorityHolders("list", res, now)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(hs, func(x, y driver.Holder) int { return strings.Compare(x.Key, y.Key) })
	return hs, nil
}

// peekGrants reads the lock keys rkeys on n, and returns the grants they
// hold.
func (b *Backend) peekGrants(ctx context.Context, n Node, rkeys []string) ([]nodeGrant, error) {
	vals, err := peekScript.Run(ctx, n, rkeys).Slice()
	if err != nil {
		return nil, err
	}
	var out []nodeGrant
	for j, rk := range rkeys {
		key, ok := decodeKey(b.cfg.prefix, rk, suffixLock)
		v, isStr := vals[2*j].(string)
		if !ok || !isStr {
			continue
		}
		g, ok := parseValue(v)
		if !ok {
			continue
		}
		g.key = key
		if p, ok := vals[2*j+1].(int64); ok && p > 0 {
			g.pttl = time.Duration(p) * time.Millisecond
		}
		out = append(out, g)
	}
	return out, nil
}

// majorityHolders returns the grants that a majority of the nodes hold,
// from the nodes' replies res, read from now on; it fails, naming the
// operation op, when fewer than a majority answered. A grant's Token is
// the highest its nodes record, Since the earliest of their clocks,
// Expires now plus the time a majority still holds it. (Its owner is the
// same on every node: it is written with the grant and never changed.)
func (b *Backend) majorityHolders(op string, res []reply[[]nodeGrant], now time.Time) ([]driver.Holder, error) {
	groups := map[[2]string][]nodeGrant{}
	answered := 0
	why := make([]string, len(res))
	for i, r := range res {
		if r.err != nil {
			why[i] = r.err.Error()
			continue
		}
		answered++
		for _, g := range r.val {
			id := [2]string{g.key, g.id}
			groups[id] = append(groups[id], g)
		}
	}
	if answered < b.maj {
		return nil, b.unavailable(op, answered, why)
	}
	var hs []driver.Holder
	for id, grants := range groups {
		if len(grants) < b.maj {
			continue
		}
		h := driver.Holder{Key: id[0], Owner: grants[0].owner, Since: grants[0].since}
		var pttls []time.Duration
		for _, x := range grants {
			h.Token = max(h.Token, x.token)
			if x.since.Before(h.Since) {
				h.Since = x.since
			}
			pttls = append(pttls, x.pttl)
		}
		slices.Sort(pttls)
		slices.Reverse(pttls)
		if p := pttls[b.maj-1]; p > 0 {
			h.Expires = now.Add(p)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// parseValue decodes a lock value as peek.lua returns it:
// "<id>|<token>|<since ms>|<owner>", the id the SHA-1 of the grant's
// secret.
func parseValue(v string) (nodeGrant, bool) {
	parts := strings.SplitN(v, "|", 4)
	if len(parts) != 4 {
		return nodeGrant{}, false
	}
	token, err1 := strconv.ParseUint(parts[1], 10, 64)
	since, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nodeGrant{}, false
	}
	return nodeGrant{id: parts[0], token: token, owner: parts[3], since: time.UnixMilli(since)}, true
}

// tagEscaper escapes a key prefix as redislock.HashTag escapes keys.
func tagEscaper(s string) string {
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(s)
}
