-- pass.lua: pass the turn of a woken waiter that has returned (it gave
-- up, or was granted, as the release woke it) to the next waiter, so that
-- the node is not kept for it in vain and the other waiters are not left
-- to their fallback timers.
--
-- KEYS[1] lock key
-- KEYS[2] the key's waiting flag (see acquire.lua)
-- KEYS[3] the key's queue of waiters
-- KEYS[4] the key's reservation
-- ARGV[1] the member that was woken
-- ARGV[2] prefix of the Backends' wake channels (see release.lua)
-- ARGV[3] reservation for the next waiter, in milliseconds
--
-- Returns 1 if it woke a waiter, 0 if not: the node is held (its release
-- wakes the next waiter), kept for another waiter, or nobody waits.

local r = redis.call('MGET', KEYS[1], KEYS[4], KEYS[2])
if r[2] and r[2] ~= ARGV[1] then
  return 0
end
if r[2] then
  redis.call('DEL', KEYS[4])
end
redis.call('ZREM', KEYS[3], ARGV[1])
if r[1] or not r[3] then
  return 0
end
for _ = 1, 16 do
  local head = redis.call('ZPOPMIN', KEYS[3])
  if #head == 0 then
    return 0
  end
  local b = string.match(head[1], '^([^|]*)|')
  if b and redis.call('PUBLISH', ARGV[2] .. b, head[1] .. ' ' .. KEYS[3]) > 0 then
    redis.call('SET', KEYS[4], head[1], 'PX', ARGV[3])
    return 1
  end
end
return 0
