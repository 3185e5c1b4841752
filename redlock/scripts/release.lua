-- release.lua: owner-checked release of one node's grant, with a tombstone
-- so that a retried release can tell "already released by me" from "no
-- longer mine". An Acquire that gave up calls it with FORCE to undo what
-- its requests did or will do on the node.
--
-- KEYS[1] lock key
-- KEYS[2] tombstone of this grant (named by a digest of its secret)
-- KEYS[3] the key's waiting flag (see acquire.lua): read the queue only
--         when set
-- KEYS[4] the key's queue of waiters (see acquire.lua)
-- KEYS[5] the key's reservation (see acquire.lua)
-- KEYS[6] the key's watch marker (see acquire.lua)
-- ARGV[1] secret of the grant
-- ARGV[2] tombstone lifetime in milliseconds
-- ARGV[3] prefix of the Backends' wake channels: a member "<b>|<w>" is
--         woken on channel ARGV[3] .. b, with the message "<member> <queue
--         key>"
-- ARGV[4] "1" to write the tombstone even when the grant is not held
-- ARGV[5] the queue member of the grant's waiter, or "": a node that was
--         held when the winning try queued it still has it
-- ARGV[6] how many milliseconds the node is kept for the waiter it wakes
--         (a reservation: "0" for none, as a try's clean-up asks)
--
-- Returns (the names are those of scripts.go):
--   RELEASED 1          this call released the node's grant
--   ALREADY_RELEASED 2  an earlier call did (its tombstone is there)
--   NOT_HELD 0          the node does not hold the grant
--
-- A release publishes on the key's holder channel while the key is
-- watched (see acquire.lua).

local NOT_HELD, RELEASED, ALREADY_RELEASED = 0, 1, 2

local prefix = ARGV[1] .. '|'
local r = redis.call('MGET', KEYS[1], KEYS[3], KEYS[6])
local v = r[1]
if r[2] and ARGV[5] ~= '' then
  redis.call('ZREM', KEYS[4], ARGV[5])
end
if v and string.sub(v, 1, #prefix) == prefix then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
  if r[3] then
    redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':holder', '')
  end
  -- Wake the first waiter whose Backend still listens, and only it (no
  -- herd): PUBLISH counts the subscribers it reached, so a waiter whose
  -- process died (its connections closed) is dropped here and the next
  -- one is woken. A woken waiter leaves the queue; its next try, if it
  -- does not win, queues it again with its ticket, in the same place.
  -- The loop is bounded so that a queue of dead waiters cannot make the
  -- script slow; those left are dropped by the next release.
  for _ = 1, r[2] and 16 or 0 do
    local head = redis.call('ZPOPMIN', KEYS[4])
    if #head == 0 then
      break
    end
    local b = string.match(head[1], '^([^|]*)|')
    if b and redis.call('PUBLISH', ARGV[3] .. b, head[1] .. ' ' .. KEYS[4]) > 0 then
      if ARGV[6] ~= '0' then
        redis.call('SET', KEYS[5], head[1], 'PX', ARGV[6])
      end
      break
    end
  end
  return RELEASED
end
if ARGV[4] == '1' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
  return NOT_HELD
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return ALREADY_RELEASED
end
return NOT_HELD
