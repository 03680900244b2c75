-- KEYS: LIVE ENDED META
-- ARGV: id meta now maxc ttl
-- Opens the log of id (its meta hash, and its place among the live logs
-- until now + ttl), within the bound of maxc logs kept. Answers {'ok'} or
-- {'full'} when every log kept is live, then the ids of the oldest ended
-- logs that the bound evicts: the caller drops each (drop.lua), since a
-- script declares the keys of its own completion only.
now, maxc, ttl = tonumber(now), tonumber(maxc), tonumber(ttl)
if redis.call('EXISTS', META) == 1 then return {'ok'} end
local over = redis.call('ZCARD', LIVE) + redis.call('ZCARD', ENDED) - maxc
local evict = {}
if over >= 0 then
  evict = redis.call('ZRANGE', ENDED, 0, over)
  if #evict <= over then return {'full'} end
end
redis.call('HSET', META, 'm', meta)
redis.call('PEXPIRE', META, ttl)
redis.call('ZADD', LIVE, now + ttl, id)
return {'ok', unpack(evict)}
