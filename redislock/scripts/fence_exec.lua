-- fence_exec.lua: the body (see fence_eval.lua) of Fence.Exec and
-- Fence.IncrBy: run a list of commands, each on one key, in order.
--
-- KEYS[i]  the key of command i
-- ARGV     per command: n (the number of words that follow), the
--          command's name, its arguments after the key
--
-- Returns the commands' replies, in order.

local out, a = {}, 1
for i = 1, #KEYS do
  local n = tonumber(ARGV[a])
  local cmd = {ARGV[a + 1], KEYS[i]}
  for j = a + 2, a + n do cmd[#cmd + 1] = ARGV[j] end
  out[i] = redis.call(unpack(cmd))
  a = a + n + 1
end
return out
