package redlock

// The Lua scripts, embedded, and the codes they return. Each script's
// header (scripts/*.lua) lists its KEYS, ARGV and replies under the names
// of the constants below.

import (
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/raise.lua
	raiseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/refresh_many.lua
	refreshManyLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/mark.lua
	markLua string
	//go:embed scripts/seed.lua
	seedLua string
	//go:embed scripts/peek.lua
	peekLua string
	//go:embed scripts/leave.lua
	leaveLua string
	//go:embed scripts/pass.lua
	passLua string
	//go:embed scripts/watch.lua
	watchLua string

	// Run with EVALSHA, falling back to EVAL when a node's script cache
	// does not have them (after a restart).
	acquireScript     = redis.NewScript(acquireLua)
	raiseScript       = redis.NewScript(raiseLua)
	refreshScript     = redis.NewScript(refreshLua)
	refreshManyScript = redis.NewScript(refreshManyLua)
	releaseScript     = redis.NewScript(releaseLua)
	markScript        = redis.NewScript(markLua)
	seedScript        = redis.NewScript(seedLua)
	peekScript        = redis.NewScript(peekLua)
	leaveScript       = redis.NewScript(leaveLua)
	passScript        = redis.NewScript(passLua)
	watchScript       = redis.NewScript(watchLua)
)

// Statuses of acquire.lua, the first element of its reply {status, value}.
const (
	voteHeld      = 0 // HELD: value is the holder's PTTL in ms, -1 without expiry
	voteGranted   = 1 // GRANTED: value is the node's counter for the grant
	voteTooLate   = 3 // TOO_LATE: the secret's tombstone exists; nothing was done
	voteUnseeded  = 4 // UNSEEDED: the node has no seed marker
	votePending   = 5 // PENDING: the node waits; value is ms until it may vote, at the earliest
	voteCopyDue   = 6 // COPY_DUE: the node's counters may be copied now; value is the start of its wait, which seed.lua checks
	voteReserved  = 7 // RESERVED: value is the reservation's PTTL in ms
	voteCopied    = 8 // COPIED: the node's counters were copied; value is ms until it votes
	voteBadMarker = 9 // BAD_MARKER: the seed marker is not one this package writes
)

// Replies of seed.lua.
const (
	copyStale = 0 // STALE
	copyDone  = 1 // COPIED
	copyVotes = 2 // VOTES
)

// Replies of release.lua.
const (
	releaseNotHeld         = 0 // NOT_HELD
	releaseReleased        = 1 // RELEASED
	releaseAlreadyReleased = 2 // ALREADY_RELEASED
)

// Replies of refresh.lua, refresh_many.lua (one per grant) and raise.lua, and nodeLate for a reply that
// came too late to count.
const (
	nodeGone = 0  // GONE
	nodeKept = 1  // EXTENDED (refresh.lua), RAISED (raise.lua)
	nodeLate = -1 // a raise.lua reply after the settle window (see grant)
)

// ceilMillis rounds d up to whole milliseconds, the unit of the scripts'
// durations: a node then keeps a grant at least as long as the holder
// counts on.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
