-- compare_del.lua: the floor's release, an owner-checked delete (the least
-- a safe Redis lock can send after its SET NX PX).
--
-- KEYS[1] lock key
-- ARGV[1] owner value the lock was set with
--
-- Returns 1 when the key held ARGV[1] and was deleted, 0 otherwise.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
