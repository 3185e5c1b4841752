-- raise.lua: the second round of a grant whose votes disagree on the
-- counter: raise this node's counter to the grant's token T, only while
-- the node still holds the grant (so that every later grant on this node
-- comes after the raise and counts above T).
--
-- KEYS[1] lock key
-- KEYS[2] the key's fencing counter
-- ARGV[1] secret of the grant
-- ARGV[2] token T (decimal)
--
-- Returns (the names are those of scripts.go):
--   RAISED 1   the counter is now at least T, and the lock value records T
--   GONE 0     the node no longer holds the grant; nothing changed
--
-- A raise publishes on the key's holder channel (see acquire.lua): the
-- token a reader finds may have changed.

local GONE, RAISED = 0, 1

local v = redis.call('GET', KEYS[1])
local prefix = ARGV[1] .. '|'
if not v or string.sub(v, 1, #prefix) ~= prefix then
  return GONE
end
local T = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < T then
  redis.call('SET', KEYS[2], ARGV[2])
end
local rest = string.match(v, '^[^|]*|%d+|(.*)$')
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2] .. '|' .. rest, 'KEEPTTL')
redis.call('PUBLISH', string.sub(KEYS[1], 1, -6) .. ':holder', '')
return RAISED
