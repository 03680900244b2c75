-- KEYS: LIVE ENDED SIZES BYTES | META LOG LEASE
-- ARGV: channel | fence id
-- Drops the log of each group's id and its accounting, and wakes their
-- followers (one notice naming every log dropped, a line each). Fenced
-- (fence not empty), a log whose lease another replica holds is left
-- alone. Dropping a log that is gone, or whose counts the script that
-- evicted it took out already (open.lua, commit.lua), is harmless.
-- Answers per group, in order, 'ok' or 'fenced'.
local out, dropped = {}, {}
local function drop(META, LOG, LEASE, fence, id)
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
  table.insert(dropped, id)
  return 'ok'
end
for i = 1, GROUPS do
  local META, LOG, LEASE = KEYS_OF(i)
  local fence, id = ARGV_OF(i)
  out[i] = drop(META, LOG, LEASE, fence, id)
end
if #dropped > 0 then redis.call('PUBLISH', channel, table.concat(dropped, '\n')) end
return out
