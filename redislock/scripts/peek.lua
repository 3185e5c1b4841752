-- peek.lua: read a lock key's value and remaining TTL, without the grant's
-- secret, for Holder and List.
--
-- KEYS[1] lock key: "<secret>|<token>|<since ms>|<waited>|<owner>" (see
--         acquire.lua)
--
-- Returns {value, pttl}: the value without its secret and the '|' after
-- it, "<token>|<since ms>|<waited>|<owner>" ("" for a value without a
-- '|', which is not a lock value), or false when the key is absent; and
-- its PTTL in milliseconds (-1 without expiry, -2 when absent). No reader
-- needs the secret (a Holder is told apart by its token), and the reply,
-- which a hook that logs commands may print, must not give away what
-- releases the grant. It changes nothing.

local v = redis.call('GET', KEYS[1])
if v then
  v = string.match(v, '^[^|]*|(.*)$') or ''
end
return {v, redis.call('PTTL', KEYS[1])}
