package redislock

// List: the locks held under a prefix, for distlock status.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// List implements driver.Lister: it SCANs for lock keys whose key starts
// with prefix (on every primary of a Cluster) and reads their values and
// PTTLs in one pipeline, one peek.lua call per key, whose reply leaves the
// grant's secret out (see Holder); a second round trip, with EVAL, only
// where the server's script cache lacked the script. Since is the
// acquiring host's clock at the grant; Expires is this host's clock plus
// the PTTL read. The listing is not a snapshot: locks granted or released
// during the scan may or may not appear. A key's shared grants (see
// AcquireShared) follow its exclusive holder, by token, with Shared set: a
// second SCAN finds the keys that have some, and one script call per key
// reads them, as Readers does.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	start := globEscape.Replace(b.cfg.prefix+"{"+tagEscaper.Replace(prefix)) + "*}"
	var (
		mu    sync.Mutex
		rkeys []string
	)
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		var found []string
		for _, suffix := range []string{suffixLock, suffixReaders} {
			it := c.Scan(ctx, 0, start+suffix, scanCount).Iterator()
			for it.Next(ctx) {
				found = append(found, it.Val())
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		mu.Lock()
		rkeys = append(rkeys, found...)
		mu.Unlock()
		return nil
	}
	var err error
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, b.client)
	}
	if err != nil {
		return nil, classify(ctx, "list", err)
	}
	slices.Sort(rkeys)
	rkeys = slices.Compact(rkeys)

	type entry struct {
		key, rk string
		cmd     *redis.Cmd
	}
	var entries []entry
	var shared []string // keys with shared grants
	for _, rk := range rkeys {
		if base, ok := strings.CutSuffix(rk, suffixReaders); ok {
			if key, ok := decodeLockKey(b.cfg.prefix, base+suffixLock); ok && strings.HasPrefix(key, prefix) {
				shared = append(shared, key)
			}
			continue
		}
		key, ok := decodeLockKey(b.cfg.prefix, rk)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue
		}
		entries = append(entries, entry{key: key, rk: rk})
	}
	var hs []driver.Holder
	for _, key := range shared {
		rs, err := b.Readers(ctx, key)
		if err != nil {
			return nil, err
		}
		hs = append(hs, rs...)
	}
	if len(entries) == 0 {
		slices.SortStableFunc(hs, func(x, y driver.Holder) int { return strings.Compare(x.Key, y.Key) })
		return hs, nil
	}
	// One peek.lua call per key, all in one pipeline; sent again with EVAL
	// where the server lacked the script.
	now := time.Now()
	send := func(eval bool, es []*entry) {
		pipe := b.client.Pipeline()
		for _, e := range es {
			if eval {
				e.cmd = peekScript().Eval(ctx, pipe, []string{e.rk})
			} else {
				e.cmd = peekScript().EvalSha(ctx, pipe, []string{e.rk})
			}
		}
		_, _ = pipe.Exec(ctx) // each call's error is its own
	}
	all := make([]*entry, len(entries))
	for i := range entries {
		all[i] = &entries[i]
	}
	send(false, all)
	var again []*entry
	for _, e := range all {
		if isNoScript(e.cmd.Err()) {
			again = append(again, e)
		}
	}
	if len(again) > 0 {
		send(true, again)
	}
	for _, e := range entries {
		res, err := e.cmd.Slice()
		if err != nil {
			return nil, classify(ctx, "list", err)
		}
		h, ok, err := parsePeek(res, now)
		if err != nil {
			return nil, fmt.Errorf("redislock: list: %q: %w", e.key, err)
		}
		if !ok {
			continue // released meanwhile
		}
		h.Key = e.key
		hs = append(hs, h)
	}
	// By key; a key's exclusive holder first, then its shared grants by
	// token (as Readers returned them).
	slices.SortStableFunc(hs, func(x, y driver.Holder) int {
		if c := strings.Compare(x.Key, y.Key); c != 0 {
			return c
		}
		switch {
		case !x.Shared && y.Shared:
			return -1
		case x.Shared && !y.Shared:
			return 1
		}
		return 0
	})
	return hs, nil
}

// parsePeek decodes peek.lua's reply {value without its secret or nil,
// pttl} read at now, and reports whether the key was held.
func parsePeek(res []any, now time.Time) (driver.Holder, bool, error) {
	if len(res) != 2 {
		return driver.Holder{}, false, fmt.Errorf("unexpected reply %v", res)
	}
	if res[0] == nil {
		return driver.Holder{}, false, nil
	}
	v, ok1 := res[0].(string)
	pttl, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return driver.Holder{}, false, fmt.Errorf("unexpected reply %v", res)
	}
	h, err := parseValue(v)
	if err != nil {
		return driver.Holder{}, false, err
	}
	if pttl > 0 {
		h.Expires = now.Add(time.Duration(pttl) * time.Millisecond)
	}
	return h, true, nil
}

// parseValue decodes a lock value as peek.lua returns it, without its
// secret: "<token>|<since ms>|<waited>|<owner>".
func parseValue(v string) (driver.Holder, error) {
	parts := strings.SplitN(v, "|", 4)
	if len(parts) != 4 {
		return driver.Holder{}, fmt.Errorf("malformed lock value")
	}
	token, err1 := strconv.ParseUint(parts[0], 10, 64)
	since, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return driver.Holder{}, fmt.Errorf("malformed lock value")
	}
	return driver.Holder{Token: token, Owner: parts[3], Since: time.UnixMilli(since)}, nil
}
