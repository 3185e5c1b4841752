-- permit_state.lua: the state of a semaphore, after dropping what lapsed.
-- The keys are those of permits.lua, inserted below with queue.lua.
-- Waiters that what it drops leaves a free permit for are woken.
--
-- ARGV[1] flags: "c" when PUBLISH counts every subscriber (a single
--         server)
--
-- Returns {limit (0 when none is stored), waiters in line, then for each
-- live permit its grant (as KEYS[2] holds it) and the ms left to its
-- expiry}.

--[[queue.lua]]
--[[permits.lua]]

local now = now_ms()
local live, waiting = purge(now, nil, string.find(ARGV[1], 'c', 1, true) ~= nil, 0)
tidy()
local res = {tonumber(redis.call('GET', KEYS[3]) or '0'), waiting}
local ps = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #ps, 2 do
  local g = redis.call('HGET', KEYS[2], ps[i])
  if g then
    res[#res + 1] = g
    res[#res + 1] = math.max(0, tonumber(ps[i + 1]) - now)
  end
end
return res
