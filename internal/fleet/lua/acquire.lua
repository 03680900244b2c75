-- KEYS: LEASE TOKEN
-- ARGV: replica ttl tokenttl
-- Takes the lease for replica, for ttl ms, if nobody holds it, with a
-- token drawn from the counter (which lives tokenttl ms). Answers the
-- token, or 0 when the lease is held.
if redis.call('EXISTS', LEASE) == 1 then return 0 end
local t = redis.call('INCR', TOKEN)
redis.call('PEXPIRE', TOKEN, tokenttl)
redis.call('SET', LEASE, t .. ' ' .. replica, 'PX', ttl)
return t
