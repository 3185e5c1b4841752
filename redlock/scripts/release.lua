-- release.lua: owner-checked release of one node's grant, with a tombstone
-- so that a retried release can tell "already released by me" from "no
-- longer mine". An Acquire that gave up calls it with FORCE to undo what
-- its requests did or will do on the node.
--
-- KEYS[1] lock key
-- KEYS[2] tombstone of this grant
-- KEYS[3] the key's waiting flag (see acquire.lua): publish only when set
-- ARGV[1] secret of the grant
-- ARGV[2] tombstone lifetime in milliseconds
-- ARGV[3] pub/sub channel that waiters listen on
-- ARGV[4] "1" to write the tombstone even when the grant is not held
--
-- Returns (the names are those of scripts.go):
--   RELEASED 1          this call released the node's grant
--   ALREADY_RELEASED 2  an earlier call did (its tombstone is there)
--   NOT_HELD 0          the node does not hold the grant

local NOT_HELD, RELEASED, ALREADY_RELEASED = 0, 1, 2

local prefix = ARGV[1] .. '|'
local r = redis.call('MGET', KEYS[1], KEYS[3])
local v = r[1]
if v and string.sub(v, 1, #prefix) == prefix then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
  if r[2] then
    redis.call('PUBLISH', ARGV[3], '')
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
