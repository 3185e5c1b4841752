-- shared_refresh.lua: owner-checked extension of a shared (read) grant,
-- by the server's clock: only a grant still live is extended, so that a
-- holder whose grant lapsed learns of the loss.
--
-- KEYS[1] the key's shared grants: ZSET secret -> expiry (server ms)
-- KEYS[2] the shared grants' values: HASH secret -> "<token>|<since>|<owner>"
-- ARGV[1] "<secret>|": the grant's member in KEYS[1]
-- ARGV[2] new TTL in milliseconds
--
-- Returns (the names are those of scripts.go):
--   EXTENDED 1  the grant was extended
--   GONE 0      the grant is gone: it expired or was dropped

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+|$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local GONE, EXTENDED = 0, 1

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return GONE
end
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then
  return GONE
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local left = math.max(1, tonumber(last[2]) - now)
redis.call('PEXPIRE', KEYS[1], left)
redis.call('PEXPIRE', KEYS[2], left)
return EXTENDED
