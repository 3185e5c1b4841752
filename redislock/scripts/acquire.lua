-- acquire.lua: grant a lock and its fencing token in one atomic step.
--
-- KEYS[1] lock key: "<secret>|<token>|<since ms>|<owner>", expiring (PX)
-- KEYS[2] fencing counter: INCR per grant, never expires
-- KEYS[3] fair queue: ZSET waiter id -> arrival sequence
-- KEYS[4] waiter liveness: ZSET waiter id -> deadline (server ms)
-- KEYS[5] tombstone of this secret: present once this grant was released,
--         or once its Acquire gave up and cleaned up after a failed request
-- ARGV[1] secret: the caller's unguessable owner value
-- ARGV[2] TTL in milliseconds
-- ARGV[3] owner description (informational)
-- ARGV[4] waiter id, or "" outside fair mode (the queue is then ignored)
-- ARGV[5] waiter liveness in milliseconds (fair mode)
-- ARGV[6] "1" to join the queue when not granted (fair mode, waiting)
--
-- Returns {status, value} (the names are those of scripts.go):
--   {GRANTED 1, token}   granted (or granted again to a re-sent request)
--   {HELD 0, pttl}       held by another grant; pttl is -1 for a lock
--                        without expiry
--   {NOT_FIRST 2, ms}    free, but another waiter is first in line (fair
--                        mode); ms: time left to that waiter's liveness
--   {TOO_LATE 3, 0}      the tombstone exists: the request was delayed in
--                        the network (or re-sent) and arrived after its
--                        Acquire gave up and cleaned up, or after the grant
--                        it asked for was released; it does nothing
--
-- first_live comes from queue.lua. Written for the common case, a free key
-- outside fair mode: one EXISTS, INCR, TIME and SET, no string.format.

local HELD, GRANTED, NOT_FIRST, TOO_LATE = 0, 1, 2, 3

local id = ARGV[4]
local pttl = -2
if redis.call('EXISTS', KEYS[1], KEYS[5]) ~= 0 then
  local v = redis.call('GET', KEYS[1])
  if not v then
    return {TOO_LATE, 0}
  end
  -- A re-sent request (the client retried after a lost reply) finds its
  -- own grant: confirm it again with a full TTL.
  local prefix = ARGV[1] .. '|'
  if string.sub(v, 1, #prefix) == prefix then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {GRANTED, tonumber(string.match(v, '^[^|]*|(%d+)|'))}
  end
  if redis.call('EXISTS', KEYS[5]) == 1 then
    return {TOO_LATE, 0}
  end
  pttl = redis.call('PTTL', KEYS[1])
  if id == '' then
    return {HELD, pttl}
  end
end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

if id ~= '' then
  local live = tonumber(ARGV[5])
  -- Skip waiters whose process stopped refreshing its liveness.
  local head = first_live(KEYS[3], KEYS[4], now, id)
  if pttl ~= -2 or (head and head ~= id) then
    if ARGV[6] == '1' then
      if not redis.call('ZSCORE', KEYS[3], id) then
        local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
        local seq = 1
        if #last > 0 then seq = tonumber(last[2]) + 1 end
        redis.call('ZADD', KEYS[3], seq, id)
      end
      redis.call('ZADD', KEYS[4], now + live, id)
      -- A queue nobody refreshes disappears by itself.
      redis.call('PEXPIRE', KEYS[3], 2 * live)
      redis.call('PEXPIRE', KEYS[4], 2 * live)
    end
    if pttl ~= -2 then
      return {HELD, pttl}
    end
    local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head) or now)
    return {NOT_FIRST, math.max(1, deadline - now)}
  end
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end

-- Concatenation formats these integers exactly: they stay far below the
-- 14 significant digits of Lua's number-to-string conversion.
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token .. '|' .. now .. '|' .. ARGV[3], 'PX', ARGV[2])
return {GRANTED, token}
