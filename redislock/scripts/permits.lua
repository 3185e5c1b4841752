-- permits.lua: what the semaphore scripts share (permit_*.lua). It is
-- inserted into each of them, with queue.lua before it, when they are
-- loaded (see scripts.go); it only defines functions. Every semaphore
-- script declares the same keys, all under the semaphore key's hash tag:
--
-- KEYS[1] live permits: ZSET permit secret -> expiry (server ms)
-- KEYS[2] the permits' grants: HASH permit secret ->
--         "<token>|<slot, -1 for none>|<since, acquiring host's ms>|<owner>"
-- KEYS[3] the stored limit: a string, kept while a permit is live or a
--         waiter in line (its expiry is theirs, the latest of them)
-- KEYS[4] the waiters' line: ZSET waiter id -> arrival sequence
-- KEYS[5] the waiters' liveness: ZSET waiter id -> deadline (server ms)
-- KEYS[6] secrets done with: ZSET permit secret -> until (server ms): a
--         permit released (until its TTL would have run out: a retried
--         release reports success), an acquire abandoned (a late copy of
--         its request does nothing)
-- KEYS[7] the key's fencing counter, which its locks share (INCR per grant)
--
-- A waiter id is "<Backend id>:<random>": wake_free (below) wakes it on <prefix>waiters:<Backend id> with its id as payload,
-- as the lock scripts wake theirs (see queue.lua).
--
-- Times are the server's (TIME), never a client's clock.

local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- wake_free wakes the waiters at ranks from to free - 1 in line (from 0),
-- self excepted: those a free permit awaits (each claims it with its own
-- try) that were not among the first free waiters before the change the
-- caller made (see purge). With counted (PUBLISH counts every subscriber:
-- a single server) it drops a waiter nobody hears there (its process is
-- gone), and the next one takes its rank and is woken in turn.
local function wake_free(from, free, self, counted)
  local wake = wake_prefix(KEYS[1])
  local i = math.max(0, from)
  while i < free do
    local w = redis.call('ZRANGE', KEYS[4], i, i)[1]
    if not w then
      return
    end
    if w == self then
      i = i + 1
    else
      local heard = redis.call('PUBLISH', wake .. string.match(w, '^[^:]*'), w)
      if heard > 0 or not counted then
        i = i + 1
      else
        redis.call('ZREM', KEYS[4], w)
        redis.call('ZREM', KEYS[5], w)
      end
    end
  end
end

-- wake_changed wakes, after changes each of which freed a permit or took
-- a waiter out of the line (changed of them), the waiters that a free
-- permit now awaits and did not before: with free = limit - live, those
-- at ranks free - changed to free - 1 (each change moved each waiter up
-- by one rank at most, or freed one more permit), self excepted. Those
-- before them were free already, and were woken then.
local function wake_changed(changed, live, waiting, self, counted)
  if changed == 0 or waiting == 0 then
    return
  end
  local limit = tonumber(redis.call('GET', KEYS[3]) or '0')
  if live < limit then
    wake_free(limit - live - changed, limit - live, self, counted)
  end
end

-- purge drops the permits whose expiry passed by now, the waiters whose
-- liveness did (first_live, self excepted: the caller refreshes its own
-- place), the records of secrets done with that lapsed, and the limit
-- when nothing is live or awaited; it wakes (wake_changed) the waiters
-- that what it dropped, and the caller's own changes before it (extra of
-- them: permits given back, waiters taken out of the line), freed. It
-- returns how many permits are live and how many wait.
local function purge(now, self, counted, extra)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    for _, s in ipairs(lapsed) do
      redis.call('HDEL', KEYS[2], s)
    end
  end
  local before = redis.call('ZCARD', KEYS[4])
  first_live(KEYS[4], KEYS[5], now, self, nil, false)
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  local live, waiting = redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[4])
  local changed = extra + #lapsed + before - waiting
  if changed > 0 then
    wake_changed(changed, live, waiting, self, counted)
    waiting = redis.call('ZCARD', KEYS[4])
  end
  if live == 0 and waiting == 0 then
    redis.call('DEL', KEYS[2], KEYS[3])
  end
  return live, waiting
end

-- tidy makes the semaphore's keys expire with what they hold: the
-- permits' keys at the last permit's expiry, the line's at the last
-- waiter's deadline, the limit at the later of both, the records of
-- secrets at the last one's end. Nothing is left once all lapsed.
local function tidy()
  local last = 0
  local p = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #p > 0 then
    last = tonumber(p[2])
    redis.call('PEXPIREAT', KEYS[1], last)
    redis.call('PEXPIREAT', KEYS[2], last)
  end
  local a = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
  if #a > 0 then
    local d = tonumber(a[2])
    redis.call('PEXPIREAT', KEYS[4], d)
    redis.call('PEXPIREAT', KEYS[5], d)
    last = math.max(last, d)
  end
  if last > 0 then
    redis.call('PEXPIREAT', KEYS[3], last)
  else
    redis.call('DEL', KEYS[3])
  end
  local g = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  if #g > 0 then
    redis.call('PEXPIREAT', KEYS[6], g[2])
  end
end
