-- release.lua: owner-checked release, remembered so that a retried release
-- can tell "already released by me" from "no longer mine"; also
-- takes a waiter out of the queue, and hands the lock to the next. An Acquire
-- that gave up after a failed request (abandon) calls it to undo whatever
-- that request did or will do.
--
-- KEYS[1] lock key
-- KEYS[2] the lock's last release: the released grant's value, with the TTL
--         it had left (the lock key renamed)
-- KEYS[3] waiter queue (ZSET)
-- KEYS[4] waiter liveness (ZSET)
-- KEYS[5] fencing counter
-- KEYS[6] the key's watch marker (see acquire.lua)
-- KEYS[7] the key's shared grants: ZSET secret -> expiry (server ms)
-- KEYS[8] the shared grants' values: HASH secret -> "<token>|<since>|<owner>"
-- KEYS[9] tombstone of this grant ("<lock base>:released:<secret>"), with
--         "f" only: a release that is not an abandon declares eight keys
-- ARGV[1] "<secret>|": the secret of the grant to release and the
--         separator that follows it in the lock key's value
-- ARGV[2] flags, any of: "q" with the queue: wake only the first live
--         waiter (without it, WithUnordered: publish on the key's release
--         channel, the lock key's base .. ":released"); "f" to write the
--         tombstone even when the grant is not held (abandon: acquire.lua
--         then refuses a late request with secret); "c" when PUBLISH counts
--         every subscriber (a single server)
-- ARGV[3] waiter to take out of the queue (as queue.lua writes it): absent
--         or "" for none
-- ARGV[4] tombstone lifetime in milliseconds, with "f"
--
-- Returns (the names are those of scripts.go):
--   RELEASED 1          this call released the grant
--   ALREADY_RELEASED 2  an earlier call did, and was the lock's last release
--   NOT_HELD 0          the grant is not held by secret: it expired or was
--                       taken over (or, with "f", never existed)
--
-- A release of a grant marked waited for (a grant made while the key was
-- watched is) publishes on the key's release channel: "" with
-- WithUnordered, which wakes the waiters and the watchers of the key's
-- holder; "h" otherwise, while the key is watched, which wakes the
-- watchers only. A grant handed to a waiter while the key is watched is
-- marked waited for, as acquire.lua marks its grants.
--
-- Written for the common case, a lock that nobody waited for: one GET
-- and one RENAME, before anything else is defined (each function
-- definition makes a closure, at every call). The queue's functions,
-- first_live and wake_prefix (queue.lua), are inserted after that, where
-- the marker line below stands.

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+|$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local NOT_HELD, RELEASED, ALREADY_RELEASED = 0, 1, 2

local flags = ARGV[2]
local force = string.find(flags, 'f', 1, true) ~= nil
local prefix = ARGV[1]
local result = NOT_HELD
local waited = false
local v = redis.call('GET', KEYS[1])
if v and string.find(v, prefix, 1, true) == 1 then
  if force then
    redis.call('DEL', KEYS[1])
    redis.call('SET', KEYS[9], '1', 'PX', ARGV[4])
  else
    redis.call('RENAME', KEYS[1], KEYS[2])
  end
  result = RELEASED
  -- The value goes on "<token>|<since>|<waited>|<owner>": waited is the
  -- byte after the second '|' past the prefix (found without a pattern,
  -- which costs more). A value of another form counts as waited for.
  local i = string.find(v, '|', #prefix + 1, true)
  i = i and string.find(v, '|', i + 1, true)
  waited = not i or string.byte(v, i + 1) ~= 48 -- '0'
elseif force then
  redis.call('SET', KEYS[9], '1', 'PX', ARGV[4])
else
  local last = redis.call('GET', KEYS[2])
  if last and string.find(last, prefix, 1, true) == 1 then
    result = ALREADY_RELEASED
  end
end

local id = ARGV[3] or ''
if id ~= '' then
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end

-- Hand the lock to the next waiter (with WithUnordered, wake them all)
-- when it became free and someone waited for it, or when a waiter left a
-- queue whose lock is free (it may have been first in line).
if not ((result == RELEASED and waited) or (id ~= '' and not v)) then
  return result
end

--[[queue.lua]]

-- The hand-off (queue.lua's hand_off) serves the shared waiters first in
-- line, each a shared grant, or the first exclusive waiter, the lock,
-- once no shared grant is live.
if string.find(flags, 'q', 1, true) then
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  -- A lock just released was granted, and held, while no shared grant
  -- was live: none is.
  local granted = hand_off({KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]}, now,
    string.find(flags, 'c', 1, true) ~= nil, result == RELEASED)
  if (granted or result == RELEASED) and redis.call('EXISTS', KEYS[6]) == 1 then
    redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':released', 'h')
  end
else
  redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':released', '')
end
return result
