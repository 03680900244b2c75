-- KEYS: LEASE TOKEN
-- ARGV: value ttl token tokenttl
-- Compare-and-pexpire: extends the lease if it still holds value; or
-- takes it again if it is gone and nobody was granted one since (the
-- counter is still token, or gone too: Redis restarted empty, or lost the
-- keys). Answers 1 when the lease is the caller's for ttl ms, 0 when it
-- is lost.
local v = redis.call('GET', LEASE)
if v == value then return redis.call('PEXPIRE', LEASE, ttl) end
if v then return 0 end
local t = redis.call('GET', TOKEN)
if t and t ~= token then return 0 end
redis.call('SET', TOKEN, token, 'PX', tokenttl)
redis.call('SET', LEASE, value, 'PX', ttl)
return 1
