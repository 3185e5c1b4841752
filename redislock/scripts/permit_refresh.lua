-- permit_refresh.lua: owner-checked extension of a permit: its expiry is
-- set to the server's time plus the TTL only while it is live, so that a
-- holder whose permit lapsed cannot take it back. The keys are those of
-- permits.lua, inserted below with queue.lua.
--
-- ARGV[1] the permit's secret
-- ARGV[2] new TTL in milliseconds
--
-- Returns (the names are those of scripts.go):
--   EXTENDED 1  the permit was extended
--   GONE 0      the permit is gone: it expired, or was released

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local GONE, EXTENDED = 0, 1

--[[queue.lua]]
--[[permits.lua]]

local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp or tonumber(exp) <= now then
  return GONE
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
tidy()
return EXTENDED
