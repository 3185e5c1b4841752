package redislock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
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

	// Run with EVALSHA, falling back to EVAL when the server's script cache
	// does not have them (after a restart or SCRIPT FLUSH).
	acquireScript = redis.NewScript(acquireLua)
	releaseScript = redis.NewScript(releaseLua)
	refreshScript = redis.NewScript(refreshLua)
	refreshMany   = redis.NewScript(refreshManyLua)
	fenceScript   = redis.NewScript(fenceLua)
)
