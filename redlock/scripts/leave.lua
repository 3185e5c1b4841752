-- leave.lua: take a waiter that gave up out of the key's queue, so that
-- no release wakes it in vain; and if a release woke it already (the node
-- is kept for it, or its Backend heard the wake-up), pass its turn on to
-- the next waiter, as pass.lua does: that release woke nobody else.
--
-- KEYS[1] lock key
-- KEYS[2] the key's waiting flag (see acquire.lua)
-- KEYS[3] the key's queue of waiters
-- KEYS[4] the key's reservation
-- ARGV[1] the waiter's member
-- ARGV[2] prefix of the Backends' wake channels (see release.lua)
-- ARGV[3] reservation for the next waiter, in milliseconds
-- ARGV[4] "1" when this node's release woke the waiter since its last try
--
-- Returns the number of members removed (0 or 1).

local n = redis.call('ZREM', KEYS[3], ARGV[1])
local r = redis.call('MGET', KEYS[1], KEYS[4], KEYS[2])
if r[2] and r[2] ~= ARGV[1] then
  return n
end
if not r[2] and ARGV[4] ~= '1' then
  return n
end
if r[2] then
  redis.call('DEL', KEYS[4])
end
if r[1] or not r[3] then
  return n
end
for _ = 1, 16 do
  local head = redis.call('ZPOPMIN', KEYS[3])
  if #head == 0 then
    return n
  end
  local b = string.match(head[1], '^([^|]*)|')
  if b and redis.call('PUBLISH', ARGV[2] .. b, head[1] .. ' ' .. KEYS[3]) > 0 then
    redis.call('SET', KEYS[4], head[1], 'PX', ARGV[3])
    return n
  end
end
return n
