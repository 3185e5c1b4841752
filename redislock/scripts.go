package redislock

// The Lua scripts, embedded, and the codes they return. Each script's
// header (scripts/*.lua) lists its KEYS, ARGV and replies under the names
// of the constants below.

import (
	"context"
	_ "embed"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/queue.lua
	queueLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/refresh_many.lua
	refreshManyLua string
	//go:embed scripts/fence.lua
	fenceLua string
	//go:embed scripts/fence_eval.lua
	fenceEvalLua string
	//go:embed scripts/fence_exec.lua
	fenceExecLua string
	//go:embed scripts/setowner.lua
	setOwnerLua string
	//go:embed scripts/watch.lua
	watchLua string
	//go:embed scripts/permits.lua
	permitsLua string
	//go:embed scripts/permit_acquire.lua
	permitAcquireLua string
	//go:embed scripts/permit_release.lua
	permitReleaseLua string
	//go:embed scripts/permit_refresh.lua
	permitRefreshLua string
	//go:embed scripts/permit_state.lua
	permitStateLua string
	//go:embed scripts/shared_acquire.lua
	sharedAcquireLua string
	//go:embed scripts/shared_release.lua
	sharedReleaseLua string
	//go:embed scripts/shared_refresh.lua
	sharedRefreshLua string
	//go:embed scripts/readers.lua
	readersLua string
	//go:embed scripts/peek.lua
	peekLua string

	// Run with EVALSHA, falling back to EVAL when the server's script cache
	// does not have them (after a restart or SCRIPT FLUSH). Each is built
	// (assembled and hashed) on first use, not when the package initialises:
	// a program that links this package and locks elsewhere (the distlock
	// command on file://) does not pay for them at each start. The queue's
	// sweep (queue.lua) is written once and inserted into the two scripts
	// that walk the queue (see withQueue).
	acquireScript = sync.OnceValue(func() *script { return newScript(withQueue(acquireLua)) })
	releaseScript = sync.OnceValue(func() *script { return newScript(withQueue(releaseLua)) })
	refreshScript = sync.OnceValue(func() *redis.Script { return redis.NewScript(refreshLua) })
	refreshMany   = sync.OnceValue(func() *redis.Script { return redis.NewScript(refreshManyLua) })
	fenceScript   = sync.OnceValue(func() *redis.Script { return redis.NewScript(fenceLua) })
	setOwner      = sync.OnceValue(func() *redis.Script { return redis.NewScript(setOwnerLua) })
	watchScript   = sync.OnceValue(func() *redis.Script { return redis.NewScript(watchLua) })

	// The semaphore's scripts, each with queue.lua and permits.lua (see
	// withPermits).
	permitAcquire = sync.OnceValue(func() *script { return newScript(withPermits(permitAcquireLua)) })
	permitRelease = sync.OnceValue(func() *script { return newScript(withPermits(permitReleaseLua)) })
	permitRefresh = sync.OnceValue(func() *script { return newScript(withPermits(permitRefreshLua)) })
	permitState   = sync.OnceValue(func() *script { return newScript(withPermits(permitStateLua)) })

	// The shared grants' scripts (see shared.go); those that walk the
	// queue with queue.lua.
	sharedAcquire = sync.OnceValue(func() *script { return newScript(withQueue(sharedAcquireLua)) })
	sharedRelease = sync.OnceValue(func() *script { return newScript(withQueue(sharedReleaseLua)) })
	sharedRefresh = sync.OnceValue(func() *script { return newScript(sharedRefreshLua) })
	readersScript = sync.OnceValue(func() *redis.Script { return redis.NewScript(readersLua) })

	// The reads of a lock value, without its secret (Holder, List).
	peekScript = sync.OnceValue(func() *redis.Script { return redis.NewScript(peekLua) })
)

// queueMarker is the line of acquire.lua and release.lua where queue.lua
// goes: after their common path, which returns before any function is
// defined.
const queueMarker = "--[[queue.lua]]\n"

// withQueue returns src with queue.lua in place of its queueMarker line.
// It panics if src has none: both scripts are embedded, so that is a
// mistake in this package, shown at the script's first use (and by
// TestScriptsBuild).
func withQueue(src string) string {
	if !strings.Contains(src, queueMarker) {
		panic("redislock: a script lacks the line " + strings.TrimSpace(queueMarker))
	}
	return strings.Replace(src, queueMarker, queueLua, 1)
}

// permitsMarker is the line of the semaphore's scripts where permits.lua
// goes, after queue.lua's marker.
const permitsMarker = "--[[permits.lua]]\n"

// withPermits returns src with queue.lua and permits.lua in place of their
// marker lines. It panics if src lacks one, as withQueue does.
func withPermits(src string) string {
	if !strings.Contains(src, permitsMarker) {
		panic("redislock: a script lacks the line " + strings.TrimSpace(permitsMarker))
	}
	return withQueue(strings.Replace(src, permitsMarker, permitsLua, 1))
}

// script is a Lua script called through runScript, with its source and
// hash converted to interface values once.
type script struct {
	*redis.Script
	src, hash any
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, src: src, hash: s.Hash()}
}

// processor is what runScript needs of a client: a *redis.Client,
// *redis.ClusterClient, *redis.Conn or redis.Pipeliner.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// runScript runs s with EVALSHA, and again with EVAL when the server's
// script cache does not have it (after a restart or SCRIPT FLUSH). args
// are {nil, nil, number of keys, keys..., arguments...}: runScript fills in
// the first two. Unlike redis.Script.Run, it takes the arguments in the
// one slice that the command is sent with (see TestClientCycleAllocs).
func runScript(ctx context.Context, c processor, s *script, args []any) *redis.Cmd {
	args[0], args[1] = "evalsha", s.hash
	cmd := redis.NewCmd(ctx, args...)
	if err := c.Process(ctx, cmd); err != nil && isNoScript(err) {
		args[0], args[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, args...)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// Statuses of acquire.lua (and shared_acquire.lua), the first element of its reply {status, value};
// a grant's reply is the bare token, read as acquireGranted.
const (
	acquireHeld     = 0 // HELD: value is the holder's PTTL in ms, -1 without expiry
	acquireGranted  = 1 // granted: the token
	acquireNotFirst = 2 // NOT_FIRST: free, another waiter first; value is ms to its liveness deadline
	acquireTooLate  = 3 // TOO_LATE: the secret's tombstone exists, or its grant was the last released; nothing was done
)

// Statuses of permit_acquire.lua, the first element of its reply.
const (
	permitFull     = 0 // FULL: {0, ms to the first permit's expiry, or 0}
	permitGranted  = 1 // GRANTED: {1, token, slot or -1}
	permitTooLate  = 3 // TOO_LATE: {3, 0}
	permitBadLimit = 4 // LIMIT: {4, the stored limit}
)

// Replies of release.lua, permit_release.lua and shared_release.lua.
const (
	releaseNotHeld         = 0 // NOT_HELD
	releaseReleased        = 1 // RELEASED
	releaseAlreadyReleased = 2 // ALREADY_RELEASED
)

// Replies of refresh.lua, of refresh_many.lua per lease, of
// permit_refresh.lua and of shared_refresh.lua.
const (
	refreshGone     = 0 // GONE
	refreshExtended = 1 // EXTENDED
)

// Replies of setowner.lua.
const (
	setOwnerGone = 0 // GONE
	setOwnerSet  = 1 // OWNER_SET
)

// Statuses of fence.lua and fence_eval.lua, the first element of their
// replies, and the prefixes of fence_eval.lua's errors.
const (
	fenceRefused  = 0 // REFUSED: {0, highest}
	fenceAdmitted = 1 // ADMITTED: {1} (fence_eval.lua: {1, result})

	fenceBodyFailed = "FENCEBODY"
	fenceKeyChanged = "FENCEKEY"
)

// ceilMillis rounds d up to whole milliseconds, the unit of the scripts'
// durations (PX, PEXPIRE): the server then keeps a grant at least as long
// as the holder counts on.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
