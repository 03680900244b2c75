-- KEYS: PROBE
-- ARGV: token ttl
-- Extends a route's probe lease by ttl ms if it still holds token.
if redis.call('GET', PROBE) == token then
  return redis.call('PEXPIRE', PROBE, ttl)
end
return 0
