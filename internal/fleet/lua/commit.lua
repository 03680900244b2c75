-- KEYS: LIVE ENDED SIZES BYTES ENDSEQ | META LOG LEASE
-- ARGV: now retention maxe maxb ttl channel | fence id seq event status fin
-- Group commit: appends one event per group, in order, each as entry
-- 0-seq of the log of its id, and with fin = 1 ends that log with status;
-- a log may have several groups. Fenced (fence is the writer's lease
-- value, not empty), a group writes only while LEASE is not another's,
-- atomically with the check: a lease that is gone refuses nothing, since
-- nobody can have written without taking it. Then the bound of maxb bytes
-- drops the oldest ended logs first (their ids are answered: the writer
-- drops each, drop.lua, since a script declares the keys of the logs it
-- writes only), then the oldest entries of the logs written, the last of
-- each kept; and one notice names every log appended ("id seq" lines).
-- Answers {replies, evicted}: per group, in order, 'ok', 'fenced',
-- 'missing' (the log is not in Redis), 'ended', or 'order' (a seq not
-- above the log's last).
now, retention, maxe, maxb, ttl = tonumber(now), tonumber(retention), tonumber(maxe), tonumber(maxb), tonumber(ttl)
local replies, notices, written = {}, {}, {}
-- bytes is what BYTES counts; kept, what is kept once the logs evicted
-- are dropped.
local bytes = tonumber(redis.call('GET', BYTES) or '0')
local function write(META, LOG, LEASE, fence, id, seq, event, status, fin)
  if fence ~= '' then
    local v = redis.call('GET', LEASE)
    if v and v ~= fence then return 'fenced' end
  end
  if redis.call('EXISTS', META) == 0 then return 'missing' end
  if redis.call('HEXISTS', META, 'ended') == 1 then return 'ended' end
  local added = redis.pcall('XADD', LOG, '0-' .. seq, 'e', event)
  if type(added) == 'table' and added.err then return 'order' end
  local size = #event + #status
  redis.call('HINCRBY', SIZES, id, size)
  bytes = bytes + size
  if fin == '1' then
    local ck = redis.call('HSTRLEN', META, 'ck')
    if ck > 0 then
      redis.call('HDEL', META, 'ck')
      redis.call('HINCRBY', SIZES, id, -ck)
      bytes = bytes - ck
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
  table.insert(notices, id .. ' ' .. seq)
  table.insert(written, {LOG, id})
  return 'ok'
end
for i = 1, GROUPS do
  local META, LOG, LEASE = KEYS_OF(i)
  local fence, id, seq, event, status, fin = ARGV_OF(i)
  replies[i] = write(META, LOG, LEASE, fence, id, seq, event, status, fin)
end
-- The oldest ended logs go first, up to 100 at a time.
local kept, evict, evicted = bytes, {}, {}
if kept > maxb then
  for _, old in ipairs(redis.call('ZRANGE', ENDED, 0, 99)) do
    if kept <= maxb then break end
    table.insert(evict, old)
    evicted[old] = true
    kept = kept - tonumber(redis.call('HGET', SIZES, old) or '0')
  end
end
-- Then the logs written lose their own oldest entries, the last one of
-- each always kept.
for _, w in ipairs(written) do
  local LOG, id = w[1], w[2]
  local n = redis.call('XLEN', LOG)
  while not evicted[id] and n > 1 and (n > maxe or kept > maxb) do
    local first = redis.call('XRANGE', LOG, '-', '+', 'COUNT', 1)[1]
    local b = #first[2][2]
    redis.call('XDEL', LOG, first[1])
    redis.call('HINCRBY', SIZES, id, -b)
    bytes, kept, n = bytes - b, kept - b, n - 1
  end
end
redis.call('SET', BYTES, string.format('%d', bytes))
if #notices > 0 then redis.call('PUBLISH', channel, table.concat(notices, '\n')) end
return {replies, evict}
