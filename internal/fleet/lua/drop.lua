-- KEYS: LIVE ENDED SIZES BYTES META LOG LEASE
-- ARGV: fence id channel
-- Drops the log of id and its accounting, and wakes its followers.
-- Fenced (fence not empty), a log whose lease another replica holds is
-- left alone: answers fenced. Dropping a log that is gone is harmless.
if fence ~= '' then
  local v = redis.call('GET', LEASE)
  if v and v ~= fence then return 'fenced' end
end
redis.call('DEL', LOG, META)
local size = tonumber(redis.call('HGET', SIZES, id) or '0')
redis.call('HDEL', SIZES, id)
redis.call('DECRBY', BYTES, size)
redis.call('ZREM', LIVE, id)
redis.call('ZREM', ENDED, id)
redis.call('PUBLISH', channel, id)
return 'ok'
