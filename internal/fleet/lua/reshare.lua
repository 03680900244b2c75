-- KEYS: META LOG LEASE TOKEN
-- ARGV: fence token leasettl tokenttl
-- Prepares the log of a completion that a replica kept in its memory
-- alone for a while, for the replica to append what Redis lacks.
-- Fenced (fence is the writer's lease value, token its token), it
-- answers fenced when another replica holds the lease, or was granted it
-- since the writer's (the counter moved on), and takes the lease again
-- when it is gone (as renew.lua does), so that nobody takes the
-- completion over while the writer appends. Answers "ok N" with N the
-- last seq the log keeps (0: none), "ended" when it ended, or "missing"
-- when Redis no longer has the log (a stale stream without its meta is
-- deleted): the caller opens it then (open.lua).
if fence ~= '' then
  local v = redis.call('GET', LEASE)
  if v and v ~= fence then return 'fenced' end
  if not v then
    local t = redis.call('GET', TOKEN)
    if t and t ~= token then return 'fenced' end
    redis.call('SET', TOKEN, token, 'PX', tokenttl)
    redis.call('SET', LEASE, fence, 'PX', leasettl)
  end
end
if redis.call('EXISTS', META) == 0 then
  redis.call('DEL', LOG)
  return 'missing'
end
if redis.call('HEXISTS', META, 'ended') == 1 then return 'ended' end
local last = redis.call('XREVRANGE', LOG, '+', '-', 'COUNT', 1)[1]
if not last then return 'ok 0' end
return 'ok ' .. string.match(last[1], '%d+$')
