-- refresh.lua: owner-checked extension of a lock (PEXPIRE only if the lock
-- still holds the caller's secret, so that a holder whose lease expired
-- cannot extend the next holder's lock).
--
-- KEYS[1] lock key
-- ARGV[1] secret of the grant
-- ARGV[2] new TTL in milliseconds
--
-- Returns 1 when extended, 0 when the grant is gone.

local prefix = ARGV[1] .. '|'
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #prefix) == prefix then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
