-- fence_eval.lua: admit a fencing token for a resource, then run the
-- caller's Lua body, in one script (Fence.Eval, Fence.Exec, Fence.IncrBy).
-- The body's text takes the place of the line --[[body]] below, inside a
-- function that runs only after the token check, and whose KEYS and ARGV
-- are the caller's own (the fence key and the token are not among them).
-- Redis does not undo writes: a body that fails halfway keeps the writes
-- it made before failing, and the token stays admitted.
--
-- KEYS[1]    fence key of the resource: the highest token admitted (decimal)
-- KEYS[2..]  the body's KEYS[1..] (same hash slot as KEYS[1])
-- ARGV[1]    token (decimal, no leading zeros)
-- ARGV[2..]  the body's ARGV[1..]
--
-- Returns (the names are those of scripts.go):
--   {ADMITTED 1, result}  admitted, and the body returned result (none
--                         when it returned nil or false)
--   {REFUSED 0, highest}  refused, the body did not run; highest is the
--                         highest token admitted (decimal string)
--   error "FENCEBODY msg" admitted; the body failed with msg
--   error "FENCEKEY msg"  admitted; the body changed the fence key, which
--                         was set back to the token

local REFUSED, ADMITTED = 0, 1

local function less(a, b) -- decimal strings without leading zeros
  if #a ~= #b then return #a < #b end
  return a < b
end

local fence, token = KEYS[1], ARGV[1]
local highest = redis.call('GET', fence) or '0'
if less(token, highest) then
  return {REFUSED, highest}
end
redis.call('SET', fence, token)

local keys, argv = {}, {}
for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
for i = 2, #ARGV do argv[i - 1] = ARGV[i] end

local function body(KEYS, ARGV)
--[[body]]
end

local ok, result = pcall(body, keys, argv)
-- The body is the caller's code: whatever it did to the fence key, the
-- key leaves this script holding the admitted token.
if redis.call('GET', fence) ~= token then
  redis.call('SET', fence, token)
  return redis.error_reply('FENCEKEY the script changed the fence key ' .. fence .. '; it was set back to ' .. token)
end
if not ok then
  if type(result) == 'table' then result = result.err end
  return redis.error_reply('FENCEBODY ' .. tostring(result))
end
if type(result) == 'table' and result.err then
  return redis.error_reply('FENCEBODY ' .. result.err)
end
return {ADMITTED, result}
