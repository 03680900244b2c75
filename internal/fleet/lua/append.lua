-- KEYS: LIVE ENDED SIZES BYTES ENDSEQ META LOG LEASE
-- ARGV: fence id seq event status fin now retention maxe maxb ttl channel
-- Appends event as entry 0-seq of the log of id and, with fin = 1, ends
-- the log with status. Fenced (fence is the writer's lease value, not
-- empty), it writes only while LEASE is not another's, atomically with
-- the check, and answers the error FENCED otherwise: a lease that is gone
-- refuses nothing, since nobody can have written without taking it.
-- Answers {'ok'}, then the ids of the oldest ended logs that the bound
-- of maxb bytes evicts (the caller drops each: drop.lua); {'missing'}
-- when the log is not in Redis; {'ended'}; or {'order'} for a seq not
-- above the last.
if fence ~= '' then
  local v = redis.call('GET', LEASE)
  if v and v ~= fence then return redis.error_reply('FENCED lease lost') end
end
now, retention, maxe, maxb, ttl = tonumber(now), tonumber(retention), tonumber(maxe), tonumber(maxb), tonumber(ttl)
if redis.call('EXISTS', META) == 0 then return {'missing'} end
if redis.call('HEXISTS', META, 'ended') == 1 then return {'ended'} end
local added = redis.pcall('XADD', LOG, '0-' .. seq, 'e', event)
if type(added) == 'table' and added.err then return {'order'} end
local size = #event + #status
redis.call('HINCRBY', SIZES, id, size)
local total = redis.call('INCRBY', BYTES, size)
-- The oldest ended logs go first, up to 100 at a time; total becomes what
-- is kept once they are dropped.
local evict = {}
if total > maxb then
  for _, old in ipairs(redis.call('ZRANGE', ENDED, 0, 99)) do
    if total <= maxb then break end
    table.insert(evict, old)
    total = total - tonumber(redis.call('HGET', SIZES, old) or '0')
  end
end
-- Then this log's own oldest entries, the last one always kept.
local n = redis.call('XLEN', LOG)
while n > 1 and (n > maxe or total > maxb) do
  local first = redis.call('XRANGE', LOG, '-', '+', 'COUNT', 1)[1]
  local b = #first[2][2]
  redis.call('XDEL', LOG, first[1])
  redis.call('HINCRBY', SIZES, id, -b)
  redis.call('DECRBY', BYTES, b)
  total = total - b
  n = n - 1
end
if fin == '1' then
  local ck = redis.call('HSTRLEN', META, 'ck')
  if ck > 0 then
    redis.call('HDEL', META, 'ck')
    redis.call('HINCRBY', SIZES, id, -ck)
    redis.call('DECRBY', BYTES, ck)
  end
  redis.call('HSET', META, 'status', status, 'ended', now)
  redis.call('ZREM', LIVE, id)
  -- Scored by the end's time (ms) times 1000 plus a counter of the ends,
  -- so that the logs ended within one millisecond keep their order.
  redis.call('ZADD', ENDED, now * 1000 + redis.call('INCR', ENDSEQ) % 1000, id)
  redis.call('PEXPIRE', META, retention)
  redis.call('PEXPIRE', LOG, retention)
else
  redis.call('ZADD', LIVE, now + ttl, id)
  redis.call('PEXPIRE', META, ttl)
  redis.call('PEXPIRE', LOG, ttl)
end
redis.call('PUBLISH', channel, id .. ' ' .. seq)
return {'ok', unpack(evict)}
