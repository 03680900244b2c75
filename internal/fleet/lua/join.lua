-- KEYS: META LEASE
-- ARGV: fence meta
-- Writes meta, with the request a takeover runs again, into the log's
-- meta while the lease is still fence and the log is there and has not
-- ended (RedisLog.joinRequest): what a new completion's first fenced
-- write does otherwise (commit.lua), for one whose first event went with
-- its open (open.lua) and whose next may be long in coming.
if redis.call('GET', LEASE) ~= fence then return 'fenced' end
if redis.call('EXISTS', META) == 0 or redis.call('HEXISTS', META, 'ended') == 1 then return 'missing' end
redis.call('HSET', META, 'm', meta)
return 'ok'
