-- acquire.lua: grant a lock and its fencing token in one atomic step.
--
-- KEYS[1] lock key: "<secret>|<token>|<since ms>|<owner>", expiring (PX)
-- KEYS[2] fencing counter: INCR per grant, never expires
-- KEYS[3] fair queue: ZSET waiter id -> arrival sequence
-- KEYS[4] waiter liveness: ZSET waiter id -> deadline (server ms)
-- ARGV[1] secret: the caller's unguessable owner value
-- ARGV[2] TTL in milliseconds
-- ARGV[3] owner description (informational)
-- ARGV[4] waiter id, or "" outside fair mode (the queue is then ignored)
-- ARGV[5] waiter liveness in milliseconds (fair mode)
-- ARGV[6] "1" to join the queue when not granted (fair mode, waiting)
--
-- Returns {1, token} when granted; {0, pttl} when held (pttl is -1 for a
-- lock without expiry); {2, ms} when the lock is free but another waiter is
-- first in line (ms: time left to that waiter's liveness deadline).

local pttl = redis.call('PTTL', KEYS[1])
local prefix = ARGV[1] .. '|'

if pttl ~= -2 then
  -- A re-sent request (the client retried after a lost reply) finds its
  -- own grant: confirm it again with a full TTL.
  local v = redis.call('GET', KEYS[1])
  if v and string.sub(v, 1, #prefix) == prefix then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    local token = string.match(v, '^[^|]*|(%d+)|')
    return {1, tonumber(token)}
  end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local id = ARGV[4]
if id ~= '' then
  local now = now_ms()
  local live = tonumber(ARGV[5])
  -- Skip waiters whose process stopped refreshing its liveness.
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, d in ipairs(dead) do
    redis.call('ZREM', KEYS[3], d)
    redis.call('ZREM', KEYS[4], d)
  end
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  while head and head ~= id and not redis.call('ZSCORE', KEYS[4], head) do
    redis.call('ZREM', KEYS[3], head)
    head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  end
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
      return {0, pttl}
    end
    local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head) or now)
    return {2, math.max(1, deadline - now)}
  end
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
elseif pttl ~= -2 then
  return {0, pttl}
end

local token = redis.call('INCR', KEYS[2])
local value = prefix .. string.format('%d', token) .. '|' .. string.format('%d', now_ms()) .. '|' .. ARGV[3]
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {1, token}
