-- refresh.lua: owner-checked extension of a lock (PEXPIRE only if the lock
-- still holds the caller's secret, so that a holder whose lease expired
-- cannot extend the next holder's lock).
--
-- KEYS[1] lock key
-- ARGV[1] secret of the grant
-- ARGV[2] new TTL in milliseconds
--
-- Returns (the names are those of scripts.go):
--   EXTENDED 1  the grant was extended
--   GONE 0      the grant is gone: it expired or was taken over

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local GONE, EXTENDED = 0, 1

local prefix = ARGV[1] .. '|'
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #prefix) == prefix then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return EXTENDED
end
return GONE
