-- acquire.lua: one node's vote for a grant, and its fencing counter, in
-- one atomic step.
--
-- KEYS[1] lock key: "<secret>|<token>|<since ms>|<owner>", expiring (PX)
-- KEYS[2] the key's fencing counter: INCR per grant, never expires
-- KEYS[3] tombstone of this secret (named by a digest of it): present once
--         this grant was released, or once its Acquire gave up and cleaned
--         up
-- KEYS[4] the node's seed marker: "ok" once the node may vote; after it
--         lost its data, "p:<since>:<copy>:<due>" (server times in ms: found
--         without a marker at since; its counters may be copied from copy
--         on; it votes from due, once they were), then "c:<due>" once they
--         were copied (the first try from due on marks it "ok" and votes)
-- KEYS[5] the key's queue of waiters: a sorted set of "<backend>|<waiter>"
--         members, scored by the waiter's ticket (the same on every node,
--         so that every node has the same first waiter); release.lua wakes
--         its first live member
-- KEYS[6] the key's waiting flag: present while the queue may have
--         members, so that release.lua reads the queue only then (one
--         command less on every uncontended release)
-- KEYS[7] the key's reservation: the member that a release woke, for a
--         moment (see release.lua); other tries find the node held
-- KEYS[8] the key's watch marker: present while a Backend watches the
--         key's holder
-- ARGV[1] secret: the caller's unguessable owner value
-- ARGV[2] TTL in milliseconds
-- ARGV[3] owner description (informational)
-- ARGV[4] "0" for a try that does not queue; for a waiting one, how many
--         milliseconds the queue outlives the holder's PTTL when the key
--         is held
-- ARGV[5] the waiter's queue member (with ARGV[4] not "0", or ARGV[7] "1")
-- ARGV[6] the waiter's ticket: its score in the queue
-- ARGV[7] "1" when an earlier try may have queued the waiter: a grant
--         takes it out of the queue
--
-- Returns {status, value} (the names are those of scripts.go):
--   {GRANTED 1, counter}  granted; the key's counter after this grant (a
--                         re-sent request finds its own grant and gets the
--                         token recorded in it)
--   {HELD 0, pttl}        held by another grant; pttl -1 without expiry
--   {RESERVED 7, pttl}    free, but kept for pttl ms more for the waiter
--                         a release woke; a waiting try is queued for as
--                         long as a grant of its own TTL would hold
--   {TOO_LATE 3, 0}       the tombstone exists: the request arrived after
--                         its Acquire gave up or its grant was released
--   {UNSEEDED 4, 0}       the node has no seed marker: it lost its data
--                         (or is new) and does not vote
--   {PENDING 5, ms}       the node waits; it votes in ms at the earliest
--   {COPY_DUE 6, since}   its counters may be copied now (seed.lua, naming
--                         the wait by since); it does not vote
--   {COPIED 8, ms}        its counters were copied; it votes in ms
--   {BAD_MARKER 9, 0}     the marker is none of the above; it does not vote
--
-- A grant publishes on the key's holder channel (the lock key's base ..
-- ":holder") while the key's watch marker (KEYS[8]) exists: a Backend
-- watches the key's holder.

local HELD, GRANTED, TOO_LATE, UNSEEDED, PENDING, COPY_DUE, RESERVED, COPIED, BAD_MARKER = 0, 1, 3, 4, 5, 6, 7, 8, 9

-- One read for the keys the vote depends on, and the clock only where
-- its reading is used: every command here is paid on every node of every
-- try.
local r = redis.call('MGET', KEYS[4], KEYS[1], KEYS[3], KEYS[7], KEYS[8])
local m, v, tomb, woken, watched = r[1], r[2], r[3], r[4], r[5]

local function now()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- queue puts a waiting try in the key's queue, for as long as the node is
-- held (pttl) and the slack. It never shortens the queue's life: the
-- other waiters in it sleep on the grants they found, maybe longer ones.
local function queue(pttl)
  if ARGV[4] ~= '0' then
    redis.call('ZADD', KEYS[5], ARGV[6], ARGV[5])
    local keep = math.max(pttl, 0) + tonumber(ARGV[4])
    if redis.call('PTTL', KEYS[5]) < keep then
      redis.call('PEXPIRE', KEYS[5], keep)
      redis.call('SET', KEYS[6], '1', 'PX', keep)
    end
  end
end

if not m then
  return {UNSEEDED, 0}
end
if m ~= 'ok' then
  local t = now()
  local since, copy, due = string.match(m, '^p:(%d+):(%d+):(%d+)$')
  if since then
    if t < tonumber(copy) then
      return {PENDING, math.max(tonumber(due) - t, 0)}
    end
    return {COPY_DUE, tonumber(since)}
  end
  due = tonumber(string.match(m, '^c:(%d+)$'))
  if not due then
    return {BAD_MARKER, 0}
  end
  if t < due then
    return {COPIED, due - t}
  end
  redis.call('SET', KEYS[4], 'ok')
end

if v then
  local prefix = ARGV[1] .. '|'
  if string.sub(v, 1, #prefix) == prefix then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {GRANTED, tonumber(string.match(v, '^[^|]*|(%d+)|'))}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  queue(pttl)
  return {HELD, pttl}
end
if tomb then
  return {TOO_LATE, 0}
end
-- Freed by a release that woke a waiter: kept for that waiter for a
-- moment (the release's reservation), as if held, so that a try already
-- on its way does not take it first and send the woken one back to wait.
if woken and woken ~= ARGV[5] then
  queue(tonumber(ARGV[2]))
  return {RESERVED, redis.call('PTTL', KEYS[7])}
end

local c = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. c .. '|' .. now() .. '|' .. ARGV[3], 'PX', ARGV[2])
if watched then
  redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':holder', '')
end
if woken then
  redis.call('DEL', KEYS[7])
end
if ARGV[7] == '1' then
  redis.call('ZREM', KEYS[5], ARGV[5])
end
return {GRANTED, c}
