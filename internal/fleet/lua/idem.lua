-- KEYS: IDEM
-- ARGV: old new ttl
-- Compare and swap of an idempotency record (Idempotency.Swap): when IDEM
-- holds old ('' for nothing), it is set to new for ttl ms, or deleted
-- when new is ''. Answers what IDEM holds after ('' for nothing): new
-- when it swapped, else what another start put there first.
local cur = redis.call('GET', IDEM) or ''
if cur ~= old then return cur end
if new == '' then
  redis.call('DEL', IDEM)
else
  redis.call('SET', IDEM, new, 'PX', ttl)
end
return new
