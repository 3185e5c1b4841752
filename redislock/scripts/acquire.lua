-- acquire.lua: grant a lock and its fencing token in one atomic step.
--
-- KEYS[1] lock key: "<secret>|<token>|<since ms>|<waited>|<owner>",
--         expiring (PX); <waited> is "1" once a waiter found it held (the
--         release then wakes waiters), "0" before
-- KEYS[2] fencing counter: INCR per grant, never expires
-- KEYS[3] waiter queue: ZSET waiter id -> arrival sequence
-- KEYS[4] waiter liveness: ZSET waiter id -> deadline (server ms)
-- KEYS[5] tombstone of this secret: present once its Acquire gave up and
--         cleaned up after a failed request
-- KEYS[6] the lock's last release (see release.lua): a grant of this
--         secret there was released, and a copy of its request that
--         arrives late (go-redis re-sent it after a read timeout, and the
--         first copy lagged in the network) must not take the key again
-- KEYS[7] the key's watch marker: present while a Backend watches the
--         key's holder (watch.lua); a grant then publishes "h" on the
--         key's release channel (the lock key's base .. ":released") and
--         marks itself waited for, so that its release publishes too
-- KEYS[8] the key's shared grants: ZSET secret -> expiry (server ms); a
--         live one holds the key as the lock key does (see queue.lua)
-- KEYS[9] the shared grants' values: HASH secret -> "<token>|<since>|<owner>"
-- ARGV[1] "<secret>|": the caller's unguessable owner value and the
--         separator that follows it in KEYS[1] (the start of the value)
-- ARGV[2] TTL in milliseconds
-- ARGV[3] "|<since>|0|<owner>": the rest of the value after the token,
--         <since> being the caller's clock, Unix ms, and <owner> the owner
--         description (both informational)
-- ARGV[4] flags, any of: "q" with the queue (without it, WithUnordered:
--         the queue is ignored); "j" for a waiting try: join the queue when
--         not granted (with a waiter id), and mark a held lock as waited
--         for; "c" when PUBLISH counts every subscriber (a single server)
-- ARGV[5] waiter id ("<Backend id>:<random>"), if the attempt has one
-- ARGV[6] waiter liveness in milliseconds, with ARGV[5]
--
-- A waiter is woken on the channel <prefix>waiters:<Backend id>, the
-- prefix being that of KEYS[1] (see queue.lua).
--
-- Returns the token when granted (or granted again to a re-sent request),
-- a bare integer (the reply of the common case, which costs less than an
-- array on both ends), and otherwise {status, value} (the names are those
-- of scripts.go):
--   {HELD 0, pttl}       held by another grant; pttl is -1 for a lock
--                        without expiry; held by shared grants only,
--                        pttl is the time left to the first one's expiry
--   {NOT_FIRST 2, ms}    free, but another waiter is first in line
--                        (queue); ms: time left to that waiter's liveness
--   HELD and NOT_FIRST have a third element, the fencing counter, when
--   the try queued a waiter ("j" with an id)
--   {TOO_LATE 3, 0}      the tombstone exists, or the last release was of
--                        this secret: the request was delayed in the
--                        network (or re-sent) and arrived after its
--                        Acquire gave up and cleaned up, or after its
--                        grant was released; it does nothing
--
-- Written for the common case, a free key that nobody waits for or
-- watches and nobody shares: one EXISTS (of the shared grants too), GET,
-- INCR and SET, before anything else is defined (each
-- function definition makes a closure, at every call). The queue's
-- functions, first_live and wake_prefix (queue.lua), are inserted after
-- that, where the marker line below stands. A waiting try that joins the
-- queue (or refreshes its place) while the key is held runs EXISTS, MGET,
-- PTTL, TIME, the sweep of lapsed waiters (ZRANGEBYSCORE), ZRANGE (the
-- last place), ZADD to each of the queue and liveness and PTTL of the
-- liveness: nine commands; a SET the first time a waiter finds the grant,
-- and PEXPIRE of both queue keys when their life runs short (keep_queue).

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+|$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local HELD, NOT_FIRST, TOO_LATE = 0, 2, 3

local prefix = ARGV[1]
local flags = ARGV[4]
local queued = string.find(flags, 'q', 1, true) ~= nil

-- One EXISTS tells which keys exist: EXISTS counts a key each time it is
-- named, so n is the sum of lock 1, tombstone 1, queue 2, watch marker 4
-- and shared grants 8 (the lock key's bit is told from the tombstone's
-- by the GET below).
local n
if queued then
  n = redis.call('EXISTS', KEYS[1], KEYS[5], KEYS[3], KEYS[3], KEYS[7], KEYS[7], KEYS[7], KEYS[7],
    KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8])
else
  n = redis.call('EXISTS', KEYS[1], KEYS[5], KEYS[7], KEYS[7], KEYS[7], KEYS[7],
    KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8], KEYS[8])
end
if n == 0 then
  -- Free, no tombstone, nobody queued: grant, unless the key's last
  -- release was of this secret (as the queued path below does).
  local last = redis.call('GET', KEYS[6])
  if last and string.find(last, prefix, 1, true) == 1 then
    return {TOO_LATE, 0}
  end
  -- Concatenation formats the token exactly: it stays far below the 14
  -- significant digits of Lua's number-to-string conversion.
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], prefix .. token .. ARGV[3], 'PX', ARGV[2])
  return token
end

--[[queue.lua]]

local waiting = string.find(flags, 'j', 1, true) ~= nil
local id = ARGV[5]
-- The lock key, the last release and the counter (for a waiter's reply),
-- in one read.
local got = redis.call('MGET', KEYS[1], KEYS[6], KEYS[2])
local v, last, counter = got[1], got[2], got[3]
if v then
  n = n - 1
end
-- n is now the sum of tombstone 1, queue 2, marker 4 and shared grants 8.
local watched = n % 8 >= 4
local shared = n >= 8

local function grant(waited)
  local token = redis.call('INCR', KEYS[2])
  local rest = ARGV[3]
  if waited or watched then
    rest = string.gsub(rest, '^(|[^|]*|)0', '%11', 1)
  end
  redis.call('SET', KEYS[1], prefix .. token .. rest, 'PX', ARGV[2])
  if watched then
    redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':released', 'h')
  end
  return token
end

if v then
  -- A re-sent request (the client retried after a lost reply), or a try
  -- of a waiter that the release woke late, finds its own grant: confirm
  -- it again with a full TTL.
  if string.find(v, prefix, 1, true) == 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(string.match(v, '^[^|]*|(%d+)|'))
  end
end
-- The key's tombstone exists, or its last release was of this secret.
if n % 2 == 1 or (last and string.find(last, prefix, 1, true) == 1) then
  return {TOO_LATE, 0}
end

-- Live shared grants hold the key as a lock does.
local readers, now = nil, nil
if shared and not v then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
  readers = live_readers(KEYS[8], KEYS[9], now)
end
local held = v or readers

local pttl = -2
if readers then
  pttl = math.max(1, readers - now)
  if not queued then
    return {HELD, pttl}
  end
elseif v then
  pttl = redis.call('PTTL', KEYS[1])
  if waiting then
    local head, waited, tail = string.match(v, '^(.-|.-|.-|)(.)(|.*)$')
    if waited == '0' then
      redis.call('SET', KEYS[1], head .. '1' .. tail, 'KEEPTTL')
    end
  end
  if not queued then
    return {HELD, pttl}
  end
end

if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
-- Skip waiters whose process stopped refreshing its liveness; when the
-- lock is free, wake the first waiter (dropping those that nobody hears).
-- While the key is held, who is first does not matter: only the waiters
-- whose liveness lapsed are dropped (sweep); one at the head without a
-- liveness entry at all (its liveness key was lost) is dropped by the
-- next hand-off, or the next try that finds the key free.
local head, deadline = nil, nil
if held then
  sweep(KEYS[3], KEYS[4], now)
else
  head, deadline = first_live(KEYS[3], KEYS[4], now, id, wake_prefix(KEYS[1]), string.find(flags, 'c', 1, true) ~= nil)
end
if held or not id or (head and head ~= id) then
  if waiting and id then
    local live = tonumber(ARGV[6])
    -- The caller's place, or the one after the last (NX: a waiter in
    -- line keeps its place).
    local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local seq = 1
    if #tail > 0 then seq = tonumber(tail[2]) + 1 end
    redis.call('ZADD', KEYS[3], 'NX', seq, id)
    redis.call('ZADD', KEYS[4], now + live, id)
    -- A queue nobody refreshes disappears by itself (keep_queue); the
    -- queue was absent if n's bit 2 is not set.
    keep_queue(KEYS[3], KEYS[4], live, n % 4 < 2)
  end
  -- A queued waiter learns the counter as this try found it: a grant
  -- handed to it later has a higher token, one handed before this try
  -- (which would have found it, had it not lapsed) does not.
  local seen = nil
  if waiting and id then
    seen = tonumber(counter or '0')
  end
  if held then
    return {HELD, pttl, seen}
  end
  if not head then
    return grant(false)
  end
  return {NOT_FIRST, math.max(1, (deadline or now) - now), seen}
end
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
return grant(redis.call('EXISTS', KEYS[3]) == 1)
