package guard

import (
	"embed"

	"github.com/completiond/completiond/internal/redisscript"
)

// The guard's Redis keys, shared by the replicas of a fleet: a route's
// breaker and its probe; an API key's concurrent completions. A route's
// two keys are hash-tagged by the route, so that one script may hold both
// on a Redis Cluster; the rate limiter's keys are redis_rate's
// (completiond:rate:…, rateKeys).
func breakerKey(route string) string { return "completiond:breaker:{" + route + "}" }
func probeKey(route string) string   { return breakerKey(route) + ":probe" }
func inflightKey(key string) string  { return "completiond:inflight:" + key }

// redisKeys is the one table of the keys the guard's scripts declare, by
// the names the scripts (lua/*.lua) read them by.
var redisKeys = redisscript.Table{
	"SLOTS":   inflightKey,
	"BREAKER": breakerKey,
	"PROBE":   probeKey,
	"SPEND":   func(subject string) string { return subject }, // a key's spend in a period (budgetSpendKey)
}

//go:embed lua/*.lua
var luaFiles embed.FS

// The guard's scripts; each file says what it does, its keys and its
// arguments.
var (
	takeSlotScript      = redisscript.Load(luaFiles, "lua/take_slot.lua", redisKeys)
	renewSlotScript     = redisscript.Load(luaFiles, "lua/renew_slot.lua", redisKeys)
	breakerAdmitScript  = redisscript.Load(luaFiles, "lua/breaker_admit.lua", redisKeys)
	breakerReportScript = redisscript.Load(luaFiles, "lua/breaker_report.lua", redisKeys)
	probeRenewScript    = redisscript.Load(luaFiles, "lua/probe_renew.lua", redisKeys)
	budgetChargeScript  = redisscript.Load(luaFiles, "lua/budget_charge.lua", redisKeys)
	budgetSpendScript   = redisscript.Load(luaFiles, "lua/budget_spend.lua", redisKeys)
)
