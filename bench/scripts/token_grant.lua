-- token_grant.lua: the token floor's acquire, the least a Redis lock that
-- issues a fencing token can send: draw the token and set the lock in one
-- script, one round trip (compare_del.lua releases it).
--
-- KEYS[1] lock key
-- KEYS[2] the key's fencing counter (INCR per try, never expires)
-- ARGV[1] owner value, unique per grant
-- ARGV[2] TTL in milliseconds
--
-- Returns the token when granted, 0 when the key is held (the token drawn
-- for the refused try is skipped: tokens stay increasing, with gaps).

local token = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return token
end
return 0
