-- seed.lua: re-seed a node whose wait is over: raise its counters to the
-- highest values read from the seeded nodes, then (with the last batch)
-- let it vote again.
--
-- KEYS[1]     the node's seed marker
-- KEYS[2..]   fencing counters
-- ARGV[1]     "1" with the last batch: mark the node seeded
-- ARGV[2]     the end of the wait that the caller saw over (the value of
--             acquire.lua's SEED_DUE): the counters were read after it
-- ARGV[3..]   the counters' values, in the order of KEYS[2..]
--
-- Returns 1, or 0 if the node is not in that wait: it was seeded by
-- another client, or it lost its data again since (its marker is gone, or
-- names a later wait, which the counters read for this one do not end).

local m = redis.call('GET', KEYS[1])
if not m or string.sub(m, 1, 2) ~= 'p:' or (tonumber(string.sub(m, 3)) or 0) ~= tonumber(ARGV[2]) then
  return 0
end
for i = 2, #KEYS do
  local want = tonumber(ARGV[i + 1])
  if tonumber(redis.call('GET', KEYS[i]) or '0') < want then
    redis.call('SET', KEYS[i], ARGV[i + 1])
  end
end
if ARGV[1] == '1' then
  redis.call('SET', KEYS[1], 'ok')
end
return 1
