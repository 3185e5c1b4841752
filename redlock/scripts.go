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

	// Run with EVALSHA, falling back to EVAL when a node's script cache
	// does not have them (after a restart).
	acquireScript = redis.NewScript(acquireLua)
	raiseScript   = redis.NewScript(raiseLua)
	refreshScript = redis.NewScript(refreshLua)
	releaseScript = redis.NewScript(releaseLua)
	markScript    = redis.NewScript(markLua)
	seedScript    = redis.NewScript(seedLua)
	peekScript    = redis.NewScript(peekLua)
	leaveScript   = redis.NewScript(leaveLua)
	passScript    = redis.NewScript(passLua)
)

// Statuses of acquire.lua, the first element of its reply {status, value}.
const (
	voteHeld     = 0 // HELD: value is the holder's PTTL in ms, -1 without expiry
	voteGranted  = 1 // GRANTED: value is the node's counter for the grant
	voteTooLate  = 3 // TOO_LATE: the secret's tombstone exists; nothing was done
	voteUnseeded = 4 // UNSEEDED: the node has no seed marker
	votePending  = 5 // PENDING: value is ms until the node may be re-seeded
	voteReserved = 7 // RESERVED: value is the reservation's PTTL in ms
	voteSeedDue  = 6 // SEED_DUE: the node may be re-seeded now; value is the end of its wait, which seed.lua checks
)

// Replies of release.lua.
const (
	releaseNotHeld         = 0 // NOT_HELD
	releaseReleased        = 1 // RELEASED
	releaseAlreadyReleased = 2 // ALREADY_RELEASED
)

// Replies of refresh.lua and raise.lua.
const (
	nodeGone = 0 // GONE
	nodeKept = 1 // EXTENDED (refresh.lua), RAISED (raise.lua)
)

// ceilMillis rounds d up to whole milliseconds, the unit of the scripts'
// durations: a node then keeps a grant at least as long as the holder
// counts on.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
