-- KEYS: PROBE
-- ARGV: token
-- Ends a route's probe if it still holds token: only by the replica that
-- probes, never after its lease lapsed and another took it.
if redis.call('GET', PROBE) == token then
  return redis.call('DEL', PROBE)
end
return 0
