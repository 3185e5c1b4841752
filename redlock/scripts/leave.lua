-- leave.lua: take a waiter that gave up out of the key's queue, so that
-- no release wakes it in vain.
--
-- KEYS[1] the key's queue of waiters (see acquire.lua)
-- ARGV[1] the waiter's member
--
-- Returns the number of members removed (0 or 1).

return redis.call('ZREM', KEYS[1], ARGV[1])
