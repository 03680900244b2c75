-- KEYS: SIZES BYTES META LEASE
-- ARGV: fence id seq data
-- Saves a checkpoint of the live log of id in its meta hash, field ck
-- ("seq data"), and counts its size in the log's bytes; fenced as
-- an append of commit.lua is. Answers ok, missing, or ended.
if fence ~= '' then
  local v = redis.call('GET', LEASE)
  if v and v ~= fence then return redis.error_reply('FENCED lease lost') end
end
if redis.call('EXISTS', META) == 0 then return 'missing' end
if redis.call('HEXISTS', META, 'ended') == 1 then return 'ended' end
local v = seq .. ' ' .. data
local delta = #v - redis.call('HSTRLEN', META, 'ck')
redis.call('HSET', META, 'ck', v)
redis.call('HINCRBY', SIZES, id, delta)
redis.call('INCRBY', BYTES, delta)
return 'ok'
