-- shared_acquire.lua: grant a shared (read) lock and its fencing token in
-- one atomic step, by the server's clock.
--
-- KEYS[1] lock key (see acquire.lua): while it exists, the key is held
--         exclusively and no shared grant is made
-- KEYS[2] fencing counter: INCR per grant, shared or not
-- KEYS[3] waiter queue: ZSET waiter id -> arrival sequence, shared with
--         the exclusive waiters (see queue.lua)
-- KEYS[4] waiter liveness: ZSET waiter id -> deadline (server ms)
-- KEYS[5] the key's shared grants: ZSET secret -> expiry (server ms)
-- KEYS[6] the shared grants' values: HASH secret -> "<token>|<since>|<owner>"
-- KEYS[7] shared grants done: ZSET secret -> until (server ms), the
--         secrets of shared grants released (until their TTL would have
--         run out) and of acquires that gave up (see shared_release.lua)
-- ARGV[1] "<secret>|": the caller's unguessable secret and a '|', as
--         acquire.lua takes it; the shared grant's member in KEYS[5]
-- ARGV[2] TTL in milliseconds
-- ARGV[3] since: the caller's clock, Unix ms (informational)
-- ARGV[4] owner description (informational)
-- ARGV[5] flags, any of: "j" for a waiting try: join the queue when not
--         granted (with a waiter id), and mark a held lock as waited for;
--         "c" when PUBLISH counts every subscriber (a single server)
-- ARGV[6] waiter id ("<Backend id>:s<random>|<secret>|<TTL ms>|<liveness
--         ms>|<owner>", see queue.lua), if the attempt has one
-- ARGV[7] waiter liveness in milliseconds, with ARGV[6]
--
-- A shared grant is made when the lock key is absent and no live
-- exclusive waiter is in the queue before the caller (a newcomer: in the
-- queue at all), so that a waiting writer keeps later readers out.
--
-- Returns, as acquire.lua does (the names are those of scripts.go):
--   the token when granted (or granted again to a re-sent request), a
--   bare integer
--   {HELD 0, pttl[, seen]}     the lock key is held; pttl is -1 without
--                              expiry
--   {NOT_FIRST 2, ms[, seen]}  an exclusive waiter is before the caller;
--                              ms: time left to the first waiter's
--                              liveness
--   seen, the fencing counter, when the try queued the waiter
--   {TOO_LATE 3, 0}            the secret is among the done: its acquire
--                              gave up, or its grant was released
--
-- The queue's functions (queue.lua) are inserted where the marker line
-- below stands.

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+|$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local HELD, NOT_FIRST, TOO_LATE = 0, 2, 3

--[[queue.lua]]

local secret = ARGV[1]
local ttl = tonumber(ARGV[2])
local flags = ARGV[5]
local waiting = string.find(flags, 'j', 1, true) ~= nil
local id = ARGV[6]

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local done = redis.call('ZSCORE', KEYS[7], secret)
if done and tonumber(done) > now then
  return {TOO_LATE, 0}
end

-- A re-sent request finds its own live grant: confirm it again with a
-- full TTL.
local readers = live_readers(KEYS[5], KEYS[6], now)
if readers and redis.call('ZSCORE', KEYS[5], secret) then
  local v = redis.call('HGET', KEYS[6], secret) or '0|'
  add_reader(KEYS[5], KEYS[6], secret, v, ttl, now)
  return tonumber(string.match(v, '^(%d+)|'))
end

local v = redis.call('GET', KEYS[1])
local wake = nil
if not v and not readers then
  wake = wake_prefix(KEYS[1])
end
local head = first_live(KEYS[3], KEYS[4], now, id, wake, string.find(flags, 'c', 1, true) ~= nil)

-- The first live exclusive waiter before the caller, if any: only the
-- members before the caller's place (all, for a caller not in line) are
-- read, and the walk stops at the first live one.
local writer = nil
if not v and head and head ~= id then
  local last = -1
  local rank = id and redis.call('ZRANK', KEYS[3], id)
  if rank then
    last = rank - 1
  end
  for _, m in ipairs(rank == 0 and {} or redis.call('ZRANGE', KEYS[3], 0, last)) do
    if not is_shared(m) then
      local d = redis.call('ZSCORE', KEYS[4], m)
      if d and tonumber(d) > now then
        writer = m
        break
      end
    end
  end
end

if not v and not writer then
  if id then
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
  end
  local token = redis.call('INCR', KEYS[2])
  add_reader(KEYS[5], KEYS[6], secret, token .. '|' .. ARGV[3] .. '|' .. ARGV[4], ttl, now)
  return token
end

local seen = nil
if waiting and id then
  local live = tonumber(ARGV[7])
  local made = false
  if not redis.call('ZSCORE', KEYS[3], id) then
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local seq = 1
    if #last > 0 then seq = tonumber(last[2]) + 1 else made = true end
    redis.call('ZADD', KEYS[3], seq, id)
  end
  redis.call('ZADD', KEYS[4], now + live, id)
  -- A queue nobody refreshes disappears by itself, and a try never
  -- shortens its life (keep_queue).
  keep_queue(KEYS[3], KEYS[4], live, made)
  seen = tonumber(redis.call('GET', KEYS[2]) or '0')
  if v then
    -- Its release looks at the queue (see acquire.lua).
    local h, waited, tail = string.match(v, '^(.-|.-|.-|)(.)(|.*)$')
    if waited == '0' then
      redis.call('SET', KEYS[1], h .. '1' .. tail, 'KEEPTTL')
    end
  end
end
if v then
  return {HELD, redis.call('PTTL', KEYS[1]), seen}
end
local deadline = tonumber(redis.call('ZSCORE', KEYS[4], writer) or now)
return {NOT_FIRST, math.max(1, deadline - now), seen}
