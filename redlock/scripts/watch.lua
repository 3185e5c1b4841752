-- watch.lua: set the key's watch marker on a node, so that its grants and
-- releases of the key are published on the key's holder channel (see
-- acquire.lua). A watching Backend calls it on every node when a watch
-- starts, and then every third of the marker's lifetime.
--
-- KEYS[1] the key's watch marker
-- ARGV[1] the marker's lifetime in milliseconds
--
-- Returns 1 if the marker was there, 0 if it was not (the first call of a
-- watch; or the node lost it, and its grants since went unannounced).

local had = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return had
