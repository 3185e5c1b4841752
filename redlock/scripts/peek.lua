-- peek.lua: read keys and their remaining TTLs, for the re-seeding of a
-- node (counters) and for listings (lock values).
--
-- KEYS[i] the keys to read
--
-- Returns an array with, for each key, its value (false when absent) and
-- its PTTL in milliseconds (-1 without expiry, -2 when absent). A lock
-- value "<secret>|<token>|<since ms>|<owner>" comes back with the secret
-- replaced by its SHA-1 in hex, "<sha1>|<token>|<since ms>|<owner>": the
-- digest tells the grants apart as the secret does (one grant has one
-- secret on every node), and the reply, which a hook that logs commands
-- may print, does not give away what releases the grant. Counters and
-- seed markers hold no '|' and come back as they are.

local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    local secret, rest = string.match(v, '^([^|]*)(|.*)$')
    if secret then
      v = redis.sha1hex(secret) .. rest
    end
  end
  out[2 * i - 1] = v
  out[2 * i] = redis.call('PTTL', KEYS[i])
end
return out
