-- KEYS: SLOTS
-- ARGV: slot ttl
-- Moves the expiry of slot to ttl ms from now, if the slot is still there
-- (a lapsed slot is not taken again). Answers 1 when renewed, else 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZADD', SLOTS, 'XX', 'CH', now + tonumber(ttl), slot) == 1 then
  redis.call('PEXPIRE', SLOTS, ttl)
  return 1
end
return 0
