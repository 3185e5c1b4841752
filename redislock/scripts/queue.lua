-- queue.lua: the waiter queue's sweep, shared by acquire.lua and release.lua.
-- Redis runs every script on its own, so this file is inserted into both
-- when they are loaded, after their common path (see scripts.go); it only
-- defines functions.
--
-- wake_prefix(lock) is the prefix of the wake channels of the lock whose
-- lock key is lock: the key's prefix (before the hash tag) .. "waiters:".
--
-- first_live(queue, alive, now, self, wake, counted) drops the waiters
-- whose liveness deadline (score in alive) passed by now, and the waiters
-- at the head of the queue that have no liveness entry at all, except self
-- (the caller's own id, or nil). With wake (a channel prefix), it also
-- wakes the first waiter left other than self: it publishes the waiter's id
-- (see below) on wake .. <the waiter's Backend id> (the part of the id
-- before ':'),
-- and, when counted is true, drops a waiter that nobody hears there (its
-- process is gone: Redis saw its pub/sub connection close) and wakes the
-- next one. It returns the first waiter left in line, or nil.
--   queue: ZSET waiter -> arrival sequence
--   alive: ZSET waiter -> liveness deadline (server ms)
-- A waiter (a member of both) is "<id>|<secret>|<TTL ms>|<liveness
-- ms>|<owner>": its id, "<Backend id>:<random>", then what a release needs
-- to grant it the lock (see release.lua).

local function wake_prefix(lock)
  return string.match(lock, '^(.-){') .. 'waiters:'
end

local function first_live(queue, alive, now, self, wake, counted)
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now)) do
    redis.call('ZREM', queue, d)
    redis.call('ZREM', alive, d)
  end
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  while head and head ~= self do
    if redis.call('ZSCORE', alive, head) then
      if not wake then
        return head
      end
      local heard = redis.call('PUBLISH', wake .. string.match(head, '^[^:]*'), string.match(head, '^[^|]*'))
      if heard > 0 or not counted then
        return head
      end
    end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', alive, head)
    head = redis.call('ZRANGE', queue, 0, 0)[1]
  end
  return head
end

