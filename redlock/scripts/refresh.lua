-- refresh.lua: owner-checked extension of one node's grant.
--
-- KEYS[1] lock key
-- ARGV[1] secret of the grant
-- ARGV[2] new TTL in milliseconds
--
-- Returns (the names are those of scripts.go):
--   EXTENDED 1  the grant was extended
--   GONE 0      the node no longer holds the grant

local GONE, EXTENDED = 0, 1

local prefix = ARGV[1] .. '|'
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #prefix) == prefix then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return EXTENDED
end
return GONE
