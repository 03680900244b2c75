-- KEYS: SPEND
-- ARGV: usdfield usd tokensfield tokens expireat
-- Sets one replica's fields of a key's spend in a period (the hash SPEND)
-- to what that replica charged there in all, its own count written whole,
-- unless a field holds more already (a later charge of the same replica
-- got there first): so a charge made while Redis was away, or lost with
-- it, reaches it with the replica's next write. The fleet's spend is the
-- sum of every replica's fields (budget_spend.lua). SPEND expires at
-- expireat (Unix ms).
local function raise(field, v)
  if tonumber(v) > tonumber(redis.call('HGET', SPEND, field) or '0') then
    redis.call('HSET', SPEND, field, v)
  end
end
raise(usdfield, usd)
raise(tokensfield, tokens)
redis.call('PEXPIREAT', SPEND, expireat)
return 'ok'
