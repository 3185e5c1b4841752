-- permit_release.lua: owner-checked release of a permit, remembered so
-- that a retried release can tell "already released by me" from "no
-- longer mine"; also takes a waiter out of the line, and wakes the
-- waiters that a permit is now free for and was not before. An acquire that gave up after a failed
-- request (abandon) calls it to undo whatever that request did or will
-- do. The keys are those of permits.lua, inserted below with queue.lua.
--
-- ARGV[1] the permit's secret
-- ARGV[2] flags, any of: "f" to record the secret as done with for
--         ARGV[4] ms whatever is found (abandon: permit_acquire.lua then
--         refuses a late request with it); "c" when PUBLISH counts every
--         subscriber (a single server)
-- ARGV[3] waiter id to take out of the line, or ""
-- ARGV[4] how long to record the secret, in milliseconds, with "f"
--
-- Returns (the names are those of scripts.go):
--   RELEASED 1          this call released the permit
--   ALREADY_RELEASED 2  an earlier call did, and its TTL would still run
--   NOT_HELD 0          the permit is not live: it expired (or, with "f",
--                       never existed)

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local NOT_HELD, RELEASED, ALREADY_RELEASED = 0, 1, 2

--[[queue.lua]]
--[[permits.lua]]

local secret, flags, id = ARGV[1], ARGV[2], ARGV[3]
local force = string.find(flags, 'f', 1, true) ~= nil
local now = now_ms()
local result = NOT_HELD
local changed = 0
local exp = redis.call('ZSCORE', KEYS[1], secret)
if exp and tonumber(exp) > now then
  redis.call('ZREM', KEYS[1], secret)
  redis.call('HDEL', KEYS[2], secret)
  result = RELEASED
  changed = 1
  if not force then
    redis.call('ZADD', KEYS[6], exp, secret)
  end
elseif not force then
  local done = redis.call('ZSCORE', KEYS[6], secret)
  if done and tonumber(done) > now then
    result = ALREADY_RELEASED
  end
end
if force then
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[4]), secret)
end
if id ~= '' then
  changed = changed + redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
end

local counted = string.find(flags, 'c', 1, true) ~= nil
-- purge wakes those that this release, this waiter's leaving, or what
-- it drops freed.
local live, waiting = purge(now, nil, counted, changed)
tidy()
return result
