-- KEYS: LIVE ENDED SIZES BYTES META LEASE TOKEN LOG
-- ARGV: id meta now maxc ttl replica leasettl tokenttl first evictn
-- Opens the log of id (its meta hash, and its place among the live logs
-- until now + ttl), within the bound of maxc logs kept; with a replica
-- (not empty), takes the completion's lease for it in the same step, as
-- acquire.lua does (for leasettl ms, a token from TOKEN, which lives
-- tokenttl ms), so that a new resumable completion costs one round trip.
-- (Its meta comes without the request: the request joins it with the
-- first write fenced by the lease, commit.lua, once the writer knows its
-- token.) With a replica and first (not empty), a new log gets first as
-- its entry 0-1, in the same step: the completion's started event, which
-- then costs no write of its own (RedisLog.openLeased).
-- Answers {'ok', token (0 without a replica), '1' when first was added
-- ('0' otherwise)} then the ids of the oldest
-- ended logs that the bound evicts (the caller drops them, drop.lua,
-- since a script declares the keys of its own completion only): at the
-- bound, evictn more than it needs, so that a full log evicts once every
-- evictn opens rather than at each (one drop call, one round trip). The
-- logs evicted leave the bound's counts here, in the same step (ENDED,
-- SIZES, BYTES), so that opens at once on other replicas evict others,
-- not the same ones again: the drop that follows deletes their keys only
-- (and were it lost, their retention ends them). {'full'}
-- when every log kept is live (no lease taken then); {'held'} when
-- another holds the lease (nothing done).
now, maxc, ttl, evictn = tonumber(now), tonumber(maxc), tonumber(ttl), tonumber(evictn)
if replica ~= '' and redis.call('EXISTS', LEASE) == 1 then return {'held'} end
local function lease()
  if replica == '' then return 0 end
  local t = redis.call('INCR', TOKEN)
  redis.call('PEXPIRE', TOKEN, tokenttl)
  redis.call('SET', LEASE, t .. ' ' .. replica, 'PX', leasettl)
  return t
end
if redis.call('EXISTS', META) == 1 then return {'ok', tostring(lease()), '0'} end
local over = redis.call('ZCARD', LIVE) + redis.call('ZCARD', ENDED) - maxc
local evict = {}
if over >= 0 then
  evict = redis.call('ZRANGE', ENDED, 0, over + evictn - 1)
  if #evict <= over then return {'full'} end
  local freed = 0
  for _, old in ipairs(evict) do
    redis.call('ZREM', ENDED, old)
    freed = freed + tonumber(redis.call('HGET', SIZES, old) or '0')
    redis.call('HDEL', SIZES, old)
  end
  if freed ~= 0 then redis.call('DECRBY', BYTES, freed) end
end
redis.call('HSET', META, 'm', meta)
redis.call('PEXPIRE', META, ttl)
redis.call('ZADD', LIVE, now + ttl, id)
local t, added = lease(), '0'
if t ~= 0 and first ~= '' then
  redis.call('XADD', LOG, '0-1', 'e', first)
  redis.call('PEXPIRE', LOG, ttl)
  added = '1'
end
return {'ok', tostring(t), added, unpack(evict)}
