-- permit_acquire.lua: one try for a permit of a counting semaphore. The
-- keys are those of permits.lua, inserted below with queue.lua.
--
-- ARGV[1] the permit's secret: unguessable, its owner value
-- ARGV[2] TTL in milliseconds
-- ARGV[3] the limit the asker names
-- ARGV[4] flags, any of: "s" to give the permit a slot; "j" for a waiting
--         try: join the line when not granted (with a waiter id), and
--         refresh the waiter's place; "c" when PUBLISH counts every
--         subscriber (a single server)
-- ARGV[5] the asker's clock, Unix ms (informational: a Holder's Since)
-- ARGV[6] the owner description (informational)
-- ARGV[7] waiter id ("<Backend id>:<random>"), if the attempt has one
-- ARGV[8] waiter liveness in milliseconds, with ARGV[7]
--
-- A newcomer (not in line) is granted when fewer than the limit are live
-- and nobody waits; the waiter of rank r in line (from 0) when fewer than
-- the limit less r are live, so that those before it keep theirs. A
-- waiting try that is not granted joins the line (or refreshes its
-- place), wakes the waiters before it that a free permit awaits, dropping
-- those nobody hears, and is granted if its rank then lets it. A grant
-- draws the token from the key's counter (INCR, shared with the key's
-- locks) and, with "s", the lowest slot no live permit has; it stores the
-- limit. It wakes nobody: the permit it takes and the waiter it takes out
-- of the line leave the same waiters free as before, and those were woken
-- when they became free.
--
-- Returns (the names are those of scripts.go):
--   {GRANTED 1, token, slot}  slot -1 without "s"; a re-sent request
--                             finds its permit and confirms it again
--   {FULL 0, ms}              not granted (queued with "j"); ms: time to
--                             the first live permit's expiry, or 0
--   {TOO_LATE 3, 0}           the secret was abandoned or released:
--                             a late copy of a request; nothing was done
--   {LIMIT 4, stored}         the semaphore stores another limit; nothing
--                             was done

-- A secret is base32 (see newSecret): one that is not was sent as text
-- ("[secret]", the same for every grant) by a client that does not write
-- a redact.Secret as its bytes. Refused before anything is done.
if not string.find(ARGV[1], '^[A-Z2-7]+$') then return redis.error_reply('BADSECRET redislock: a secret that no Backend draws (not base32, A-Z and 2-7): the client sent a redact.Secret as text, not as its bytes (MarshalBinary)') end

local FULL, GRANTED, TOO_LATE, LIMIT = 0, 1, 3, 4

--[[queue.lua]]
--[[permits.lua]]

local secret, ttl, flags, id = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[7]
local waiting_try = id and string.find(flags, 'j', 1, true) ~= nil
local counted = string.find(flags, 'c', 1, true) ~= nil
local now = now_ms()
local live, waiting = purge(now, id, counted, 0)

if redis.call('ZSCORE', KEYS[6], secret) then
  return {TOO_LATE, 0}
end
local mine = redis.call('HGET', KEYS[2], secret)
if mine then
  redis.call('ZADD', KEYS[1], 'XX', now + ttl, secret)
  tidy()
  local token, slot = string.match(mine, '^(%d+)|(-?%d+)|')
  return {GRANTED, tonumber(token), tonumber(slot)}
end

local limit = tonumber(ARGV[3])
local stored = redis.call('GET', KEYS[3])
if stored and tonumber(stored) ~= limit then
  tidy()
  return {LIMIT, tonumber(stored)}
end

-- grant gives the asker (of rank in line, or nil for a newcomer) a permit.
local function grant(rank)
  local token = redis.call('INCR', KEYS[7])
  local slot = -1
  if string.find(flags, 's', 1, true) then
    local used = {}
    for _, v in ipairs(redis.call('HVALS', KEYS[2])) do
      local s = tonumber(string.match(v, '^%d+|(-?%d+)|'))
      if s then
        used[s] = true
      end
    end
    slot = 0
    while used[slot] do
      slot = slot + 1
    end
  end
  redis.call('ZADD', KEYS[1], now + ttl, secret)
  redis.call('HSET', KEYS[2], secret, token .. '|' .. slot .. '|' .. ARGV[5] .. '|' .. ARGV[6])
  redis.call('SET', KEYS[3], limit)
  if rank then
    redis.call('ZREM', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
  end
  tidy()
  return {GRANTED, token, slot}
end

local rank = nil
if id then
  rank = redis.call('ZRANK', KEYS[4], id)
end
if rank then
  if live + rank < limit then
    return grant(rank)
  end
elseif waiting == 0 and live < limit then
  return grant(nil)
end

if waiting_try then
  if not rank then
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    local seq = 1
    if #last > 0 then seq = tonumber(last[2]) + 1 end
    redis.call('ZADD', KEYS[4], seq, id)
  end
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[8]), id)
  redis.call('SET', KEYS[3], limit)
  if live < limit then
    -- Wake those before us that a free permit awaits (a permit that
    -- lapsed unannounced), dropping those nobody hears: that can leave
    -- our own rank free, and we are granted now, not at our timer.
    wake_free(0, limit - live, id, counted)
    rank = redis.call('ZRANK', KEYS[4], id)
    if live + rank < limit then
      return grant(rank)
    end
  end
end
tidy()
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then
  return {FULL, math.max(1, tonumber(first[2]) - now)}
end
return {FULL, 0}
