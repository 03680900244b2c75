-- KEYS: SLOTS
-- ARGV: slot ttl
-- Moves the expiry of slot to ttl ms from now, taking it again when it is
-- gone (a Redis that restarted empty, an outage longer than ttl): the
-- completion it counts still runs, so it counts again, even past the
-- key's maximum. Its holder stops renewing before it gives the slot back,
-- so a renewal never takes back a slot given back. Answers 1 when the
-- slot was there, 0 when it was taken again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local added = redis.call('ZADD', SLOTS, now + tonumber(ttl), slot)
redis.call('PEXPIRE', SLOTS, ttl)
return 1 - added
