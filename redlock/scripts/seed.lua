-- seed.lua: copy onto a node that lost its data the highest counters read
-- from a majority of the nodes that have theirs, once its wait allows it;
-- with the last batch, mark it copied ("c:<due>"), or "ok" if its wait
-- is over already.
--
-- KEYS[1]     the node's seed marker
-- KEYS[2..]   fencing counters
-- ARGV[1]     "1" with the last batch
-- ARGV[2]     the wait whose copy this is: the since of its marker, as
--             acquire.lua's COPY_DUE reported it (the counters were read
--             after that reply)
-- ARGV[3..]   the counters' values, in the order of KEYS[2..]
--
-- Returns (the names are those of scripts.go):
--   COPIED 1   the counters were raised (and with the last batch, the
--              node marked "c:<due>")
--   VOTES 2    with the last batch: the same, and the node marked "ok"
--   STALE 0    nothing changed: the node is not in that wait, or not yet
--              at its copy time (it was copied by another client, or it
--              lost its data again since: its marker is gone, or names a
--              later wait, which counters read for this one do not cover)

local STALE, COPIED, VOTES = 0, 1, 2

local m = redis.call('GET', KEYS[1])
local since, copy, due
if m then
  since, copy, due = string.match(m, '^p:(%d+):(%d+):(%d+)$')
end
if not since or tonumber(since) ~= tonumber(ARGV[2]) then
  return STALE
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if now < tonumber(copy) then
  return STALE
end
for i = 2, #KEYS do
  local want = tonumber(ARGV[i + 1])
  if tonumber(redis.call('GET', KEYS[i]) or '0') < want then
    redis.call('SET', KEYS[i], ARGV[i + 1])
  end
end
if ARGV[1] == '1' then
  if now >= tonumber(due) then
    redis.call('SET', KEYS[1], 'ok')
    return VOTES
  end
  redis.call('SET', KEYS[1], 'c:' .. due)
end
return COPIED
