-- KEYS: LOCK
-- ARGV: token
-- Releases a route's breaker lock if it still holds token: only by its
-- holder, never after it lapsed and another replica took it.
if redis.call('GET', LOCK) == token then
  return redis.call('DEL', LOCK)
end
return 0
