-- KEYS: LIVE ENDED SIZES BYTES ENDSEQ | META LOG LEASE FOLLOWED
-- ARGV: now retention maxe maxb ttl channel | fence id seq event status fin renew meta size notify check before
-- Group commit: appends one event per group, in order, each as entry
-- 0-seq of the log of its id, and with fin = 1 ends that log with status;
-- a log may have several groups. A group's before (not empty) holds the
-- events just before its event (seqs seq-n to seq-1), each as its length
-- in decimal, a colon and its bytes: the group appends them ahead of its
-- event, all or none (checked as one write whose first seq is seq-n), so
-- that a log's end carries its terminal transition with its result. Fenced (fence is the writer's lease
-- value, not empty), a group writes only while LEASE is not another's,
-- atomically with the check; a lease that is gone refuses nothing, since
-- nobody can have written without taking it, but then an ended log is
-- refused (a superseded owner that wakes after the new one ended it and
-- gave the lease up). Then the bound of maxb bytes drops the oldest ended
-- logs first (their ids are answered: the writer drops each, drop.lua,
-- since a script declares the keys of the logs it writes only), then the
-- oldest entries of the logs written, the last of each kept; and one
-- notice names every log appended that a replica follows ("id seq"
-- lines), so that the replicas hear only of the logs they wait for: the
-- groups with notify = 1 (their writer knows the log followed: a
-- follower's read announced itself, RedisLog.announce), and the renewals
-- and ends of a log marked followed (FOLLOWED, set by the followers'
-- reads), which look the mark up themselves and answer 'okf' then, so
-- that the writer notifies the log's next events.
-- With renew = 1 (the writer's first write of the log, and then once
-- ttl/16 has passed since it last renewed it: the writer keeps the time),
-- the log must exist and not have ended, and its place in LIVE and its
-- keys' TTL are renewed: a live log lapses ttl after its last event, give
-- or take ttl/16. Otherwise the event is added only to a stream that
-- exists (XADD NOMKSTREAM): a log dropped or lapsed since is missing.
-- Sizes: a group adds size (not 0) to its log's size in SIZES and to
-- BYTES, once its event is in: the writer counts its events' bytes itself
-- and passes them at a renewal, at the end, and whenever enough of them
-- wait (RedisLog.sizeOf), so that BYTES is always the sum of SIZES, a
-- running log's last events counted late rather than at every event.
-- So an event costs the fence's GET and the XADD, and no lookup of its
-- own. A fenced group's meta (not empty) replaces the log's meta once the
-- event is in: the request a takeover runs again joins the log with the
-- lease holder's first write.
-- A group without an event (event empty) is a request joining its log
-- (RedisLog.joinRequest: a log opened with its first event, open.lua,
-- whose next may be long in coming): meta replaces the log's meta while
-- LEASE is fence, not merely not another's, and the log is there and has
-- not ended; it answers 'ok', 'fenced' or 'missing', and adds nothing.
-- A fenced group that ends its log gives the lease up when it is the
-- writer's (deletes LEASE), as release.lua would after it: nobody takes
-- over a completion that has ended, and its owner need not release the
-- lease in a call of its own (RedisLog.Unfence says so); it answers 'okr'
-- then ('okrf' when followed as above).
-- A renewal's seq, and with check = 1 any group's, must follow the log's
-- last entry (follows): 'gap' when the entries before it are not there,
-- so that a Redis that lost acknowledged writes (a failover's, a
-- restart's from a saved copy) never gets a log with a hole in it; the
-- writer publishes its copy again then. The writer asks for the check
-- when Redis may have lost writes since its last one was acknowledged
-- (RedisLog.suspect): not at every event, a lookup that costs a third
-- more of Redis's time per event.
-- Answers {replies, evicted}: per group, in order, 'ok' ('okf', 'okr' as above),
-- 'fenced', 'missing' (the log is not in Redis), 'ended', 'gap' (events
-- before seq are missing), or 'order' (a seq not above the log's last).
now, retention, maxe, maxb, ttl = tonumber(now), tonumber(retention), tonumber(maxe), tonumber(maxb), tonumber(ttl)
local replies, notices, written = {}, {}, {}
-- added is what the writes add to BYTES (one INCRBY, at the end of the
-- writes, unless it is 0); kept, what is kept once the logs evicted are
-- dropped.
local added = 0
-- tops are the seqs this call appended last, per log.
local tops = {}
-- follows answers nil when seq may follow the log's last entry: it is the
-- next (seq - 1 is the last), or the first of a log that has none yet
-- (seq 1, renew). Otherwise 'gap' when entries before seq are not there
-- (Redis lost acknowledged writes: a failover, a restart from a saved
-- copy), 'order' when seq is not above the last, 'missing' when the log
-- is not there. The last entry is always kept (trims keep it), so the
-- check is one lookup, made once per log and call.
local function follows(LOG, id, seq, renew)
  seq = tonumber(seq)
  if tops[id] == seq - 1 then return nil end
  local last = redis.call('XREVRANGE', LOG, '+', '-', 'COUNT', 1)[1]
  if not last then
    if not renew then return 'missing' end
    if seq == 1 then return nil end
    return 'gap'
  end
  local top = tonumber(string.match(last[1], '%d+$'))
  if top == seq - 1 then return nil end
  if top >= seq then return 'order' end
  return 'gap'
end
-- split answers the events of a group's before, in order.
local function split(before)
  local evs, pos = {}, 1
  while pos <= #before do
    local colon = string.find(before, ':', pos, true)
    local n = tonumber(string.sub(before, pos, colon - 1))
    table.insert(evs, string.sub(before, colon + 1, colon + n))
    pos = colon + n + 1
  end
  return evs
end
local function write(META, LOG, LEASE, FOLLOWED, fence, id, seq, event, status, fin, renew, meta, size, notify, check, before)
  -- first is the seq of the group's first event, head its bytes; evs,
  -- with a before, all of its events (no table for the usual group).
  local first, head, evs = tonumber(seq), event, nil
  if before ~= '' then
    evs = split(before)
    first, head = first - #evs, evs[1]
    table.insert(evs, event)
  end
  local held = false
  if fence ~= '' then
    local v = redis.call('GET', LEASE)
    if v and v ~= fence then return 'fenced' end
    if not v and redis.call('HEXISTS', META, 'ended') == 1 then return 'ended' end
    held = v == fence
  end
  local entry
  if renew == '1' then
    if redis.call('EXISTS', META) == 0 then return 'missing' end
    if redis.call('HEXISTS', META, 'ended') == 1 then return 'ended' end
    local after = follows(LOG, id, first, true)
    if after then return after end
    entry = redis.pcall('XADD', LOG, '0-' .. first, 'e', head)
  else
    if check == '1' then
      local after = follows(LOG, id, first, false)
      if after then return after end
    end
    entry = redis.pcall('XADD', LOG, 'NOMKSTREAM', '0-' .. first, 'e', head)
    if not entry then return 'missing' end
  end
  if type(entry) == 'table' and entry.err then return 'order' end
  -- The first entry is in, above the log's last: the rest follow it.
  if evs then
    for k = 2, #evs do
      redis.call('XADD', LOG, '0-' .. (first + k - 1), 'e', evs[k])
    end
  end
  tops[id] = tonumber(seq)
  if meta ~= '' and fence ~= '' then redis.call('HSET', META, 'm', meta) end
  size = tonumber(size)
  if size ~= 0 then
    redis.call('HINCRBY', SIZES, id, size)
    added = added + size
  end
  if fin == '1' then
    local ck = redis.call('HSTRLEN', META, 'ck')
    if ck > 0 then
      redis.call('HDEL', META, 'ck')
      redis.call('HINCRBY', SIZES, id, -ck)
      added = added - ck
    end
    redis.call('HSET', META, 'status', status, 'ended', now)
    redis.call('ZREM', LIVE, id)
    -- Scored by the end's time (ms) times 1000 plus a counter of the ends,
    -- so that the logs ended within one millisecond keep their order.
    redis.call('ZADD', ENDED, now * 1000 + redis.call('INCR', ENDSEQ) % 1000, id)
    redis.call('PEXPIRE', META, retention)
    redis.call('PEXPIRE', LOG, retention)
    if held then redis.call('DEL', LEASE) end
  elseif renew == '1' then
    redis.call('ZADD', LIVE, now + ttl, id)
    redis.call('PEXPIRE', META, ttl)
    redis.call('PEXPIRE', LOG, ttl)
  end
  table.insert(written, {LOG, id, tonumber(seq)})
  local ok = 'ok'
  if fin == '1' and held then ok = 'okr' end
  if renew == '1' or fin == '1' then
    if redis.call('EXISTS', FOLLOWED) == 0 then return ok end
    table.insert(notices, id .. ' ' .. seq)
    return ok .. 'f'
  end
  if notify == '1' then table.insert(notices, id .. ' ' .. seq) end
  return 'ok'
end
local function join(META, LEASE, fence, meta)
  if redis.call('GET', LEASE) ~= fence then return 'fenced' end
  if redis.call('EXISTS', META) == 0 or redis.call('HEXISTS', META, 'ended') == 1 then return 'missing' end
  redis.call('HSET', META, 'm', meta)
  return 'ok'
end
for i = 1, GROUPS do
  local META, LOG, LEASE, FOLLOWED = KEYS_OF(i)
  local fence, id, seq, event, status, fin, renew, meta, size, notify, check, before = ARGV_OF(i)
  if event == '' then
    replies[i] = join(META, LEASE, fence, meta)
  else
    replies[i] = write(META, LOG, LEASE, FOLLOWED, fence, id, seq, event, status, fin, renew, meta, size, notify, check, before)
  end
end
-- The oldest ended logs go first, up to 100 at a time, out of the bound's
-- counts at once (ENDED, SIZES, BYTES), so that a flush beside this one
-- evicts others, not the same ones again; the writer's drop deletes their
-- keys (and were it lost, their retention ends them). A call that counted
-- no bytes (most: sizes are counted late) leaves BYTES and the bound of
-- bytes alone: it cannot have passed it.
local kept, evict, evicted, freed = 0, {}, {}, 0
if added ~= 0 then kept = redis.call('INCRBY', BYTES, added) end
if kept > maxb then
  for _, old in ipairs(redis.call('ZRANGE', ENDED, 0, 99)) do
    if kept <= maxb then break end
    table.insert(evict, old)
    evicted[old] = true
    local size = tonumber(redis.call('HGET', SIZES, old) or '0')
    redis.call('ZREM', ENDED, old)
    redis.call('HDEL', SIZES, old)
    kept, freed = kept - size, freed + size
  end
end
-- Then the logs written lose their own oldest entries, the last one of
-- each always kept. A log holds seq entries at most (0-1 to 0-seq).
local trimmed = 0
for _, w in ipairs(written) do
  local LOG, id, seq = w[1], w[2], w[3]
  local n = 0
  if not evicted[id] and (seq > maxe or kept > maxb) then n = redis.call('XLEN', LOG) end
  while n > 1 and (n > maxe or kept > maxb) do
    local first = redis.call('XRANGE', LOG, '-', '+', 'COUNT', 1)[1]
    local b = #first[2][2]
    redis.call('XDEL', LOG, first[1])
    redis.call('HINCRBY', SIZES, id, -b)
    trimmed, kept, n = trimmed + b, kept - b, n - 1
  end
end
if trimmed + freed > 0 then redis.call('DECRBY', BYTES, trimmed + freed) end
if #notices > 0 then redis.call('PUBLISH', channel, table.concat(notices, '\n')) end
return {replies, evict}
