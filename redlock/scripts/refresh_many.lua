-- refresh_many.lua: refresh.lua for many grants of one node at once
-- (RefreshAll), one call for up to refreshBatch grants.
--
-- KEYS[i]        lock key of grant i
-- ARGV[i]        secret of grant i
-- ARGV[#KEYS+1]  new TTL in milliseconds
--
-- Returns an array whose element i is refresh.lua's reply for grant i
-- (the names are those of scripts.go):
--   EXTENDED 1  the grant was extended
--   GONE 0      the node no longer holds the grant

local GONE, EXTENDED = 0, 1

local ttl = ARGV[#KEYS + 1]
local replies = {}
for i, key in ipairs(KEYS) do
  local prefix = ARGV[i] .. '|'
  local v = redis.call('GET', key)
  if v and string.sub(v, 1, #prefix) == prefix then
    redis.call('PEXPIRE', key, ttl)
    replies[i] = EXTENDED
  else
    replies[i] = GONE
  end
end
return replies
