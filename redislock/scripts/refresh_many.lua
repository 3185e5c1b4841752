-- refresh_many.lua: refresh.lua for many leases at once, on a server that
-- holds all their keys (not a Cluster: the keys are in different slots).
--
-- KEYS[i]        lock key of lease i
-- ARGV[i]        secret of lease i
-- ARGV[#KEYS+1]  new TTL in milliseconds
--
-- Returns an array: element i is refresh.lua's reply for lease i,
-- EXTENDED 1 or GONE 0.

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
for i = 1, #KEYS do
  if not string.find(ARGV[i], '^[A-Z2-7]+$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end
end

local GONE, EXTENDED = 0, 1

local ttl = ARGV[#KEYS + 1]
local out = {}
for i = 1, #KEYS do
  local prefix = ARGV[i] .. '|'
  local v = redis.call('GET', KEYS[i])
  if v and string.sub(v, 1, #prefix) == prefix then
    redis.call('PEXPIRE', KEYS[i], ttl)
    out[i] = EXTENDED
  else
    out[i] = GONE
  end
end
return out
