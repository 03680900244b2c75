-- KEYS: META CANCEL
-- ARGV: id channel minttl
-- Asks the fleet to cancel completion id: when its log is live, marks it
-- cancelled (CANCEL, for as long as the log's meta lives, and at least
-- minttl ms: a replica that takes the completion over later still finds
-- the mark) and names it on channel, so that the replica that runs it
-- cancels it at once. Atomic with the look at the log: an ended log, or
-- one Redis does not keep, is never marked. Answers 'live', 'ended' or
-- 'missing'.
if redis.call('EXISTS', META) == 0 then return 'missing' end
if redis.call('HEXISTS', META, 'ended') == 1 then return 'ended' end
local ttl = math.max(redis.call('PTTL', META), tonumber(minttl))
redis.call('SET', CANCEL, '1', 'PX', ttl)
redis.call('PUBLISH', channel, id)
return 'live'
