package guard

import (
	"embed"

	"github.com/completiond/completiond/internal/redisscript"
)

// The guard's Redis keys, shared by the replicas of a fleet: a route's
// breaker, its lock and its probe; an API key's concurrent completions.
// Each names one subject, not a completion, so none is hash-tagged; the
// rate limiter's keys are redis_rate's (completiond:rate:…, rateKeys).
func cbKey(route string) string      { return "completiond:cb:" + route }
func cbLockKey(route string) string  { return cbKey(route) + ":lock" }
func cbProbeKey(route string) string { return cbKey(route) + ":probe" }
func inflightKey(key string) string  { return "completiond:inflight:" + key }

// redisKeys is the one table of the keys the guard's scripts declare, by
// the names the scripts (lua/*.lua) read them by.
var redisKeys = redisscript.Table{
	"SLOTS": inflightKey,
	"LOCK":  cbLockKey,
	"PROBE": cbProbeKey,
}

//go:embed lua/*.lua
var luaFiles embed.FS

// The guard's scripts; each file says what it does, its keys and its
// arguments.
var (
	takeSlotScript     = redisscript.Load(luaFiles, "lua/take_slot.lua", redisKeys)
	renewSlotScript    = redisscript.Load(luaFiles, "lua/renew_slot.lua", redisKeys)
	unlockScript       = redisscript.Load(luaFiles, "lua/unlock.lua", redisKeys)
	probeRenewScript   = redisscript.Load(luaFiles, "lua/probe_renew.lua", redisKeys)
	probeReleaseScript = redisscript.Load(luaFiles, "lua/probe_release.lua", redisKeys)
)
