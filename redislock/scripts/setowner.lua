-- setowner.lua: owner-checked change of the owner description stored with
-- a grant (the last field of the lock key's value), keeping its expiry;
-- the watchers of the key's holder are told (see acquire.lua).
--
-- KEYS[1] lock key
-- ARGV[1] "<secret>|": the secret of the grant and the separator after it
-- ARGV[2] the new owner description
--
-- Returns (the names are those of scripts.go):
--   OWNER_SET 1  the owner was replaced
--   GONE 0       the grant is gone: it expired or was taken over

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+|$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local GONE, OWNER_SET = 0, 1

local v = redis.call('GET', KEYS[1])
if not v or string.find(v, ARGV[1], 1, true) ~= 1 then
  return GONE
end
-- "<secret>|<token>|<since>|<waited>|": the owner follows the fourth '|'.
local i = #ARGV[1]
for _ = 1, 3 do
  i = string.find(v, '|', i + 1, true)
  if not i then
    return GONE
  end
end
redis.call('SET', KEYS[1], string.sub(v, 1, i) .. ARGV[2], 'KEEPTTL')
redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':released', 'h')
return OWNER_SET
