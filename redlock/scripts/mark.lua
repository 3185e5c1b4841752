-- mark.lua: mark a node that has no seed marker: it lost its data (start
-- its wait), or it is part of a new deployment (it votes at once).
--
-- KEYS[1] the node's seed marker
-- ARGV[1] "new" for a new deployment (the caller's round found every
--         node without a marker); otherwise how many milliseconds from now
--         on the node's counters may be copied
-- ARGV[2] with "new": the grace, in milliseconds, during which a wait just
--         marked by another client is taken back (that client's round met
--         this deployment's first "ok" marks before the others landed);
--         otherwise how many milliseconds from now on the node may vote,
--         once its counters were copied
--
-- Returns 1 if this call wrote the marker, 0 if it left the one there.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ARGV[1] == 'new' then
  local m = redis.call('GET', KEYS[1])
  if m then
    local since = tonumber(string.match(m, '^p:(%d+):'))
    if not since or now >= since + tonumber(ARGV[2]) then
      return 0
    end
  end
  redis.call('SET', KEYS[1], 'ok')
  return 1
end
local marker = 'p:' .. now .. ':' .. (now + tonumber(ARGV[1])) .. ':' .. (now + tonumber(ARGV[2]))
return redis.call('SET', KEYS[1], marker, 'NX') and 1 or 0
