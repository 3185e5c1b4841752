-- queue.lua: the fair queue's sweep, shared by acquire.lua and release.lua.
-- Redis runs every script on its own, so this file is prepended to both
-- when they are loaded (see scripts.go); it only defines a function.
--
-- first_live(queue, alive, now, self) drops the waiters whose liveness
-- deadline (score in alive) passed by now, and the waiters at the head of
-- the queue that have no liveness entry at all, except self (the caller's
-- own id, or nil). It returns the first waiter left in line, or nil.
--   queue: ZSET waiter id -> arrival sequence
--   alive: ZSET waiter id -> liveness deadline (server ms)

local function first_live(queue, alive, now, self)
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now)) do
    redis.call('ZREM', queue, d)
    redis.call('ZREM', alive, d)
  end
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  while head and head ~= self and not redis.call('ZSCORE', alive, head) do
    redis.call('ZREM', queue, head)
    head = redis.call('ZRANGE', queue, 0, 0)[1]
  end
  return head
end

