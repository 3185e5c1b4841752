-- mark.lua: start the wait of a node that has no seed marker (it lost its
-- data, or is new), or end it at once for a new deployment.
--
-- KEYS[1] the node's seed marker
-- ARGV[1] wait in milliseconds; "0" marks the node seeded at once (a
--         deployment whose every node answered without a marker)
--
-- Returns 1 if this call wrote the marker, 0 if one was there already.

if ARGV[1] == '0' then
  return redis.call('SET', KEYS[1], 'ok', 'NX') and 1 or 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return redis.call('SET', KEYS[1], 'p:' .. (now + tonumber(ARGV[1])), 'NX') and 1 or 0
