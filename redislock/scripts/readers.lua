-- readers.lua: the live shared (read) grants of one key, by the server's
-- clock, for Readers and List.
--
-- KEYS[1] the key's shared grants: ZSET secret -> expiry (server ms)
-- KEYS[2] the shared grants' values: HASH secret -> "<token>|<since>|<owner>"
--
-- Returns a flat array, two elements per live grant: its value
-- "<token>|<since>|<owner>" (never its secret) and the milliseconds left
-- to its expiry. It changes nothing.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local v = redis.call('HGET', KEYS[2], live[i])
  if v then
    table.insert(out, v)
    table.insert(out, tonumber(live[i + 1]) - now)
  end
end
return out
