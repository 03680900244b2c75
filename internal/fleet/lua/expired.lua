-- KEYS: LIVE ENDED
-- ARGV: now retention
-- Answers the ids of the logs whose time has passed, up to 100 of each
-- kind: the ended logs that ended retention ago, and the live logs that
-- lapsed (no event for their TTL: their replica died). The caller drops
-- each (drop.lua).
now, retention = tonumber(now), tonumber(retention)
local ids = redis.call('ZRANGEBYSCORE', ENDED, '-inf', (now - retention) * 1000 + 999, 'LIMIT', 0, 100)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', LIVE, '-inf', now, 'LIMIT', 0, 100)) do
  table.insert(ids, id)
end
return ids
