-- KEYS: BREAKER PROBE
-- ARGV: now token lease
-- Admits a call through a route's shared circuit breaker in one round
-- trip, with no lock: its state is the string "state generation failures
-- expiry" at BREAKER (state 0 closed, 1 half-open, 2 open; expiry, in ms,
-- the end of an open circuit's cool-down; no key is a closed circuit of
-- generation 0), read and moved here. A closed circuit admits and writes
-- nothing. An open one refuses until now reaches its expiry, then becomes
-- half-open, a new generation. A half-open one admits one probe for the
-- whole fleet: the call that takes PROBE (with token, for lease ms; its
-- replica renews it while the probe runs, its report deletes it, and it
-- lapses if that replica dies).
-- Answers {admitted (1 or 0), state, generation, failures, expiry}.
now = tonumber(now)
local st, gen, fails, expiry = 0, 0, 0, 0
local v = redis.call('GET', BREAKER)
if v then
  local a, b, c, d = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')
  if a then st, gen, fails, expiry = tonumber(a), tonumber(b), tonumber(c), tonumber(d) end
end
if st == 2 then
  if expiry > now then return {0, st, gen, fails, expiry} end
  st, gen = 1, gen + 1
  redis.call('SET', BREAKER, string.format('%d %d %d %d', st, gen, fails, expiry))
end
if st == 1 and not redis.call('SET', PROBE, token, 'NX', 'PX', lease) then
  return {0, st, gen, fails, expiry}
end
return {1, st, gen, fails, expiry}
