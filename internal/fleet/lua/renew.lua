-- KEYS: | LEASE TOKEN
-- ARGV: ttl tokenttl | value token
-- Renews several leases at once, each a compare-and-pexpire: extends the
-- lease if it still holds value; or takes it again if it is gone and
-- nobody was granted one since (the counter is still token, or gone too:
-- Redis restarted empty, or lost the keys). Answers, per group, 1 when the
-- lease is the caller's for ttl ms, 0 when it is lost.
local function renew(LEASE, TOKEN, value, token)
  local v = redis.call('GET', LEASE)
  if v == value then return redis.call('PEXPIRE', LEASE, ttl) end
  if v then return 0 end
  local t = redis.call('GET', TOKEN)
  if t and t ~= token then return 0 end
  redis.call('SET', TOKEN, token, 'PX', tokenttl)
  redis.call('SET', LEASE, value, 'PX', ttl)
  return 1
end
local out = {}
for i = 1, GROUPS do
  local LEASE, TOKEN = KEYS_OF(i)
  local value, token = ARGV_OF(i)
  out[i] = renew(LEASE, TOKEN, value, token)
end
return out
