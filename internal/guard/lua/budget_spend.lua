-- KEYS: SPEND
-- ARGV:
-- Answers the fleet's spend of a key in a period: {usd, tokens}, the sums
-- of every replica's fields of SPEND (budget_charge.lua: <replica>:usd and
-- <replica>:tokens), as text.
local usd, tokens = 0, 0
local all = redis.call('HGETALL', SPEND)
for i = 1, #all, 2 do
  if string.sub(all[i], -4) == ':usd' then
    usd = usd + tonumber(all[i + 1])
  else
    tokens = tokens + tonumber(all[i + 1])
  end
end
return {string.format('%.17g', usd), string.format('%d', tokens)}
