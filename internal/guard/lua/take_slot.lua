-- KEYS: SLOTS
-- ARGV: slot max ttl
-- Drops the lapsed slots of an API key's concurrent completions, then
-- adds slot until ttl ms from now unless max slots are taken. Answers
-- {1, n} when the slot is taken, {0, n} when not, n the slots then taken.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', SLOTS, '-inf', now)
local n = redis.call('ZCARD', SLOTS)
if n >= tonumber(max) then
  return {0, n}
end
redis.call('ZADD', SLOTS, now + tonumber(ttl), slot)
redis.call('PEXPIRE', SLOTS, ttl)
return {1, n + 1}
