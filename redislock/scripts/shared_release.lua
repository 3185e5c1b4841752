-- shared_release.lua: owner-checked release of a shared (read) grant,
-- remembered so that a retried release can tell "already released by me"
-- from "no longer mine"; also takes a waiter out of the queue, and hands
-- the key to the waiters first in line once it is free. An AcquireShared
-- that gave up after a failed request (abandon) calls it to undo whatever
-- that request did or will do.
--
-- KEYS[1] lock key (see acquire.lua)
-- KEYS[2] fencing counter
-- KEYS[3] waiter queue (ZSET)
-- KEYS[4] waiter liveness (ZSET)
-- KEYS[5] the key's watch marker (see acquire.lua)
-- KEYS[6] the key's shared grants: ZSET secret -> expiry (server ms)
-- KEYS[7] the shared grants' values: HASH secret -> "<token>|<since>|<owner>"
-- KEYS[8] shared grants done: ZSET secret -> until (server ms)
-- ARGV[1] "<secret>|": the grant's member in KEYS[6]
-- ARGV[2] flags, any of: "f" to record the secret as done even when it
--         holds no grant (abandon: shared_acquire.lua then refuses a
--         late request with it); "c" when PUBLISH counts every subscriber
--         (a single server)
-- ARGV[3] waiter to take out of the queue (as queue.lua writes it): ""
--         for none
-- ARGV[4] how long to keep the secret as done with "f", in milliseconds
--
-- Returns (the names are those of scripts.go):
--   RELEASED 1          this call released the grant
--   ALREADY_RELEASED 2  an earlier call did (and its grant's TTL would
--                       still run)
--   NOT_HELD 0          the grant is not held by secret: it expired or was
--                       taken over (or, with "f", never existed)
--
-- A grant released records its secret as done until its expiry, so that
-- a late copy of its acquire request does nothing. The waiters are served
-- (queue.lua's hand_off) when the lock key is absent and the queue is
-- not: the shared waiters first in line are granted at once, the first
-- exclusive waiter once no shared grant is live. A writer so granted is
-- published ("h") on the key's channel while the key is watched (KEYS[5]),
-- and a key left free (no lock key, no live shared grant) is published
-- ("") there for the waiters that do not queue (WithUnordered), as
-- release.lua does.

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+|$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local NOT_HELD, RELEASED, ALREADY_RELEASED = 0, 1, 2

--[[queue.lua]]

local secret = ARGV[1]
local flags = ARGV[2]
local force = string.find(flags, 'f', 1, true) ~= nil
local id = ARGV[3] or ''

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

-- done keeps secret as done until expiry_ms, and drops what lapsed.
local function done(expiry_ms)
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
  local old = tonumber(redis.call('ZSCORE', KEYS[8], secret) or '0')
  redis.call('ZADD', KEYS[8], math.max(old, expiry_ms), secret)
  local last = redis.call('ZRANGE', KEYS[8], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[8], math.max(1, tonumber(last[2]) - now))
end

local result = NOT_HELD
live_readers(KEYS[6], KEYS[7], now)
local expiry = redis.call('ZSCORE', KEYS[6], secret)
if expiry then
  redis.call('ZREM', KEYS[6], secret)
  redis.call('HDEL', KEYS[7], secret)
  result = RELEASED
  if not force then
    done(tonumber(expiry))
  end
elseif not force then
  local d = redis.call('ZSCORE', KEYS[8], secret)
  if d and tonumber(d) > now then
    result = ALREADY_RELEASED
  end
end
if force then
  done(now + tonumber(ARGV[4]))
end

if id ~= '' then
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  -- A writer the waiters were handed the key to is announced to the
  -- key's watchers, as release.lua does.
  if redis.call('EXISTS', KEYS[3]) == 1 and
      hand_off({KEYS[1], KEYS[3], KEYS[4], KEYS[2], KEYS[5], KEYS[6], KEYS[7]}, now, string.find(flags, 'c', 1, true) ~= nil, false) then
    if redis.call('EXISTS', KEYS[5]) == 1 then
      redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':released', 'h')
    end
  elseif not live_readers(KEYS[6], KEYS[7], now) then
    -- The key is free: wake the waiters that do not queue (WithUnordered),
    -- as release.lua does.
    redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':released', '')
  end
end
return result
