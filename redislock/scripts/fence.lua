-- fence.lua: admit a fencing token for a resource and write, atomically.
-- A token lower than the highest admitted is refused and nothing is
-- written; an equal token is admitted (a holder may write twice).
--
-- KEYS[1] fence key of the resource: the highest token admitted (decimal)
-- KEYS[2] data key (same hash slot as KEYS[1])
-- ARGV[1] token (decimal, no leading zeros)
-- ARGV[2] operation: "set", "hset" or "del"
-- ARGV[3..] for "set": value, TTL in milliseconds ("0": none);
--           for "hset": field, value, field, value, ...
--
-- Returns (the names are those of scripts.go):
--   {ADMITTED 1}         admitted and written
--   {REFUSED 0, highest} refused, nothing written; highest is the highest
--                        token admitted (decimal string)

local REFUSED, ADMITTED = 0, 1

local function less(a, b) -- decimal strings without leading zeros
  if #a ~= #b then return #a < #b end
  return a < b
end

local op = ARGV[2]
if op ~= 'set' and op ~= 'hset' and op ~= 'del' then
  return redis.error_reply('ERR fence.lua: unknown operation ' .. op)
end

local highest = redis.call('GET', KEYS[1]) or '0'
if less(ARGV[1], highest) then
  return {REFUSED, highest}
end
redis.call('SET', KEYS[1], ARGV[1])

if op == 'set' then
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  else
    redis.call('SET', KEYS[2], ARGV[3])
  end
elseif op == 'hset' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
else
  redis.call('DEL', KEYS[2])
end
return {ADMITTED}
