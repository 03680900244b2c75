-- KEYS: BREAKER PROBE
-- ARGV: generation outcome now failures cooldown token
-- Records the outcome of a call breaker_admit.lua admitted in generation:
-- 'ok' (the upstream answered), 'fail' (it is down, overloaded, silent or
-- broken) or 'excluded' (says nothing about the route). An outcome of an
-- older generation (the circuit opened, or half-opened, since the call was
-- admitted) is ignored, as gobreaker does. Closed: 'ok' clears the
-- failures; 'fail' counts one, and the failures-th in a row opens the
-- circuit until now + cooldown (ms), a new generation. Half-open, the
-- probe's outcome: 'ok' closes the circuit, 'fail' opens it again (each a
-- new generation), 'excluded' leaves it half-open for the next probe. A
-- probe's token (empty for other calls) ends its lease.
-- Answers the state after (0 closed, 1 half-open, 2 open).
now, failures, cooldown = tonumber(now), tonumber(failures), tonumber(cooldown)
if token ~= '' and redis.call('GET', PROBE) == token then redis.call('DEL', PROBE) end
local st, gen, fails, expiry = 0, 0, 0, 0
local v = redis.call('GET', BREAKER)
if v then
  local a, b, c, d = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')
  if a then st, gen, fails, expiry = tonumber(a), tonumber(b), tonumber(c), tonumber(d) end
end
if gen ~= tonumber(generation) or outcome == 'excluded' then return st end
local was = string.format('%d %d %d %d', st, gen, fails, expiry)
if outcome == 'ok' then
  if st == 1 then st, gen = 0, gen + 1 end
  fails = 0
elseif st == 1 then
  st, gen, fails, expiry = 2, gen + 1, 0, now + cooldown
else
  fails = fails + 1
  if st == 0 and fails >= failures then st, gen, fails, expiry = 2, gen + 1, 0, now + cooldown end
end
local is = string.format('%d %d %d %d', st, gen, fails, expiry)
if is ~= was then redis.call('SET', BREAKER, is) end
return st
