-- watch.lua: mark a key as watched, so that its grants and releases are
-- published on its release channel (see acquire.lua and release.lua).
-- A watching Backend calls it when a watch starts and then every third of
-- the marker's lifetime while the watch lasts.
--
-- KEYS[1] lock key
-- KEYS[2] the key's watch marker
-- ARGV[1] the marker's lifetime in milliseconds
--
-- Returns 1 if the marker was there, 0 if it was not (the first call of a
-- watch; or the marker was lost, by a restart without persistence, a
-- failover or an eviction, and grants since went unannounced, so the
-- watcher must read again). The current grant, made before the key was
-- watched, is marked waited for, so that its release is published.

local had = redis.call('EXISTS', KEYS[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
local v = redis.call('GET', KEYS[1])
if v then
  local head, waited, tail = string.match(v, '^(.-|.-|.-|)(.)(|.*)$')
  if waited == '0' then
    redis.call('SET', KEYS[1], head .. '1' .. tail, 'KEEPTTL')
  end
end
return had
