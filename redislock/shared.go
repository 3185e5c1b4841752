package redislock

// Shared (read) grants (driver.SharedLocks): a sorted set of the key's
// shared grants scored by their expiry in the server's time, their values
// in a hash beside it, under the key's hash tag, changed by Lua scripts
// (scripts/shared_*.lua) that judge expiry by the server's clock (TIME).
// Waiting reuses the locks' machinery: the attempt, driver.Wait, the
// Backend's wake channel and the queue, in which shared and exclusive
// waiters stand in one line.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact"
)

var _ driver.SharedLocks = (*Backend)(nil)

// AcquireShared implements driver.SharedLocks. A try is one script, which
// grants a shared lock when the key's lock key is absent and no exclusive
// waiter is in line before the asker (a newcomer: in line at all),
// drawing its token from the key's lock counter. A waiting AcquireShared
// waits as a lock's Acquire does (see Waiting in the package
// documentation), in the same queue: a release hands the key to the
// shared waiters first in line at once, each its own shared grant. A
// Backend made WithUnordered keeps no queue for its exclusive waiters, so
// that readers could not see them wait: its AcquireShared fails with an
// error matching errors.ErrUnsupported.
func (b *Backend) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if b.cfg.unordered {
		return nil, fmt.Errorf("%w: redislock: shared locks need the queue, which WithUnordered turns off", errors.ErrUnsupported)
	}
	if b.isClosed() {
		return nil, ErrClosed
	}
	if err := b.checkEviction(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	a := b.newAttempt(key, opts)
	a.shared = true
	if opts.Wait {
		return a.wait(ctx)
	}
	l, r, err := a.try(ctx, false)
	if err != nil {
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: redislock: %s", driver.ErrNotAcquired, r.why)
	}
	return l, nil
}

// sharedArgs are the arguments of shared_acquire.lua for one try, as
// runScript takes them.
func (a *attempt) sharedArgs(join bool) []any {
	b := a.b
	flags := b.sharedFlags[0]
	if join {
		flags = b.sharedFlags[1]
	}
	args := []any{nil, nil, 7, a.args.lock, a.args.token, a.args.queue, a.args.alive, a.args.readers, a.args.grants, a.args.done,
		a.args.held, b.millisArg(a.opts.TTL), time.Now().UnixMilli(), a.opts.Owner, flags, nil, nil}
	if a.waiterID == "" {
		return args[:len(args)-2]
	}
	args[len(args)-2], args[len(args)-1] = &a.waiter, b.livenessArg
	return args
}

// runSharedRelease runs shared_release.lua for the shared grant of args,
// as runRelease runs release.lua: it releases the grant if held, takes
// *waiter (if waiter is not nil) out of the queue, and with abandon > 0
// records the grant's secret as done for that long.
func (b *Backend) runSharedRelease(ctx context.Context, args *scriptArgs, waiter *redact.Secret, abandon time.Duration) (int64, error) {
	var id any = ""
	if waiter != nil {
		id = waiter
	}
	flags := b.sharedReleaseFlags[0]
	if abandon > 0 {
		flags = b.sharedReleaseFlags[1]
	}
	n, err := runScript(ctx, b.client, sharedRelease(), []any{nil, nil, 8, args.lock, args.token, args.queue, args.alive, args.watched,
		args.readers, args.grants, args.done, args.held, flags, id, ceilMillis(abandon)}).Int64()
	return n, classify(ctx, "", err)
}

// sharedRefreshArgs are the arguments of shared_refresh.lua for l, as
// runScript takes them.
func (l *lease) sharedRefreshArgs(ttl time.Duration) []any {
	return []any{nil, nil, 2, l.args.readers, l.args.grants, l.args.held, ceilMillis(ttl)}
}

// Readers implements driver.SharedLocks: one script reads the key's live
// shared grants by the server's clock. Since is the acquiring host's
// clock at the grant (the server's at a hand-off); Expires is this host's
// clock plus the time the server counts to the grant's expiry.
func (b *Backend) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	base := b.cfg.prefix + HashTag(key)
	now := time.Now()
	res, err := readersScript().Run(ctx, b.client, []string{base + suffixReaders, base + suffixGrants}).Slice()
	if err != nil {
		return nil, classify(ctx, "readers", err)
	}
	return parseReaders(key, now, res)
}

// parseReaders decodes readers.lua's reply for key, read at now, sorted
// by token.
func parseReaders(key string, now time.Time, res []any) ([]driver.Holder, error) {
	if len(res)%2 != 0 {
		return nil, fmt.Errorf("redislock: readers: %q: unexpected reply", key)
	}
	var hs []driver.Holder
	for i := 0; i < len(res); i += 2 {
		v, ok1 := res[i].(string)
		ms, ok2 := res[i+1].(int64)
		parts := strings.SplitN(v, "|", 3)
		if !ok1 || !ok2 || len(parts) != 3 {
			return nil, fmt.Errorf("redislock: readers: %q: malformed shared grant", key)
		}
		token, err1 := strconv.ParseUint(parts[0], 10, 64)
		since, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("redislock: readers: %q: malformed shared grant", key)
		}
		hs = append(hs, driver.Holder{Key: key, Token: token, Owner: parts[2], Since: time.UnixMilli(since),
			Expires: now.Add(time.Duration(ms) * time.Millisecond), Shared: true})
	}
	slices.SortFunc(hs, func(x, y driver.Holder) int {
		switch {
		case x.Token < y.Token:
			return -1
		case x.Token > y.Token:
			return 1
		}
		return 0
	})
	return hs, nil
}
