-- peek.lua: read keys and their remaining TTLs, for the re-seeding of a
-- node (counters) and for listings (lock values).
--
-- KEYS[i] the keys to read
--
-- Returns an array with, for each key, its value (false when absent) and
-- its PTTL in milliseconds (-1 without expiry, -2 when absent).

local out = {}
for i = 1, #KEYS do
  out[2 * i - 1] = redis.call('GET', KEYS[i])
  out[2 * i] = redis.call('PTTL', KEYS[i])
end
return out
