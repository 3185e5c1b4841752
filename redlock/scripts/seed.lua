-- seed.lua: re-seed a node whose wait is over: raise its counters to the
-- highest values read from the seeded nodes, then (with the last batch)
-- let it vote again.
--
-- KEYS[1]     the node's seed marker
-- KEYS[2..]   fencing counters
-- ARGV[1]     "1" with the last batch: mark the node seeded
-- ARGV[2..]   the counters' values, in the order of KEYS[2..]
--
-- Returns 1, or 0 if the node is not waiting for its seed (it was seeded
-- by another client, or lost its data again: its marker is not "p:...").

local m = redis.call('GET', KEYS[1])
if not m or string.sub(m, 1, 2) ~= 'p:' then
  return 0
end
for i = 2, #KEYS do
  local want = tonumber(ARGV[i])
  if tonumber(redis.call('GET', KEYS[i]) or '0') < want then
    redis.call('SET', KEYS[i], ARGV[i])
  end
end
if ARGV[1] == '1' then
  redis.call('SET', KEYS[1], 'ok')
end
return 1
