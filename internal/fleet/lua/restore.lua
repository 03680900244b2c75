-- KEYS: LIVE ENDED SIZES BYTES META LOG LEASE TOKEN
-- ARGV: id meta status ended now retention maxc maxb fence token scan
-- Then the log's events, two arguments each: seq, event (ARGV[12] on),
-- in seq order.
-- Restores, whole and ended in one step, the log of id that Redis lost
-- whole (a restart that came back empty, a replica promoted without it)
-- from the copy of the replica that ended it: its meta, its events, its
-- end (status; ended, the end's time in ms), in its place among the ended
-- logs (scored by that time) for what is left of its retention — as if it
-- had never been lost. So the bounds decide as they would have: a log
-- whose retention has passed is not restored ('expired'), nor one that
-- the bounds, full, would evict first, older than every ended log they
-- keep ('evicted': it may be how it went; the scan oldest ended logs are
-- looked at); to make room, the ended logs older than it go, oldest
-- first, out of the counts in this step, their ids answered for the
-- caller to drop (drop.lua), as open.lua does. Fenced (fence is the
-- writer's last lease value, token its token) as reshare.lua is: 'fenced'
-- when another replica holds the lease or was granted it since (the
-- completion is another's now); the writer's lease, still there, is given
-- up, as the end's write gives it up (commit.lua). A log Redis holds is left alone ('there':
-- reshare.lua publishes what it lacks).
-- Answers {'restored', evicted ids...}, or {'there'}, {'fenced'},
-- {'expired'}, {'evicted'} with nothing done.
ended, now, retention = tonumber(ended), tonumber(now), tonumber(retention)
maxc, maxb, scan = tonumber(maxc), tonumber(maxb), tonumber(scan)
if redis.call('EXISTS', META) == 1 then return {'there'} end
local held = false
if fence ~= '' then
  local v = redis.call('GET', LEASE)
  if v and v ~= fence then return {'fenced'} end
  local t = redis.call('GET', TOKEN)
  if t and t ~= token then return {'fenced'} end
  held = v ~= false
end
-- What the bounds still count of the log gone (its keys lost, its
-- accounting not) is dropped first, as drop.lua would: it is counted
-- anew below.
redis.call('ZREM', LIVE, id)
redis.call('ZREM', ENDED, id)
local prev = tonumber(redis.call('HGET', SIZES, id) or '0')
if prev ~= 0 then
  redis.call('HDEL', SIZES, id)
  redis.call('DECRBY', BYTES, prev)
end
local left = ended + retention - now
if left <= 0 then return {'expired'} end
local size = #status
for i = 13, #ARGV, 2 do size = size + #ARGV[i] end
local score = ended * 1000
local over = redis.call('ZCARD', LIVE) + redis.call('ZCARD', ENDED) + 1 - maxc
local overb = tonumber(redis.call('GET', BYTES) or '0') + size - maxb
local evict, freed = {}, 0
if over > 0 or overb > 0 then
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', ENDED, '-inf', '(' .. score, 'LIMIT', 0, scan)) do
    if over <= 0 and overb <= 0 then break end
    local b = tonumber(redis.call('HGET', SIZES, old) or '0')
    table.insert(evict, old)
    over, overb, freed = over - 1, overb - b, freed + b
  end
  if over > 0 or overb > 0 then return {'evicted'} end
  for _, old in ipairs(evict) do
    redis.call('ZREM', ENDED, old)
    redis.call('HDEL', SIZES, old)
  end
end
redis.call('DEL', LOG)
for i = 12, #ARGV, 2 do
  redis.call('XADD', LOG, '0-' .. ARGV[i], 'e', ARGV[i + 1])
end
redis.call('HSET', META, 'm', meta, 'status', status, 'ended', ended)
redis.call('PEXPIRE', META, left)
redis.call('PEXPIRE', LOG, left)
if held then redis.call('DEL', LEASE) end
redis.call('ZADD', ENDED, score, id)
redis.call('HSET', SIZES, id, size)
if size - freed ~= 0 then redis.call('INCRBY', BYTES, size - freed) end
return {'restored', unpack(evict)}
