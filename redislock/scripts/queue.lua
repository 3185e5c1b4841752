-- queue.lua: the waiter queue's sweep, shared by the scripts that walk the
-- queue (acquire.lua, release.lua, the shared grants' and the permits').
-- Redis runs every script on its own, so this file is inserted into each
-- when it is loaded, after their common path (see scripts.go); it
-- defines functions, and dropped, the count of waiters this call of the
-- script dropped from the queue by sweep and live_head (hand_off's pops
-- are not counted: no script keeps the queue after a hand-off).
--
-- wake_prefix(lock) is the prefix of the wake channels of the lock whose
-- lock key is lock: the key's prefix (before the hash tag) .. "waiters:".
--
-- first_live(queue, alive, now, self, wake, counted) drops the waiters
-- whose liveness deadline (score in alive) passed by now, and the waiters
-- at the head of the queue that have no liveness entry at all, except self
-- (the caller's own id, or nil). With wake (a channel prefix), it also
-- wakes the first waiter left other than self: it publishes the waiter's id
-- (see below) on wake .. <the waiter's Backend id> (the part of the id
-- before ':'),
-- and, when counted is true, drops a waiter that nobody hears there (its
-- process is gone: Redis saw its pub/sub connection close) and wakes the
-- next one. It returns the first waiter left in line, or nil, and when
-- that waiter is not self, its liveness deadline (a number).
--
-- sweep(queue, alive, now) is first_live's first step alone: it drops the
-- waiters whose liveness deadline passed by now, wherever they are in line.
--
-- live_head(queue, alive, self, wake, counted) is first_live without the
-- sweep.
--
-- keep_queue(queue, alive, live, made) has both keys of the queue outlive
-- a deadline live ms from now, that of the waiter the caller just added
-- or refreshed, without ever shortening their life (a waiter with a longer
-- liveness may be in line): both expire twice live from now when the
-- liveness key has less than 1.5 times live left (or no expiry: then every
-- waiter's deadline is within twice live). Otherwise the queue key must
-- not expire before the liveness key: when this call made the queue key
-- (made), or dropped waiters (which may have emptied it, made again by
-- the caller without expiry), it gets the liveness key's time left if it
-- has less. In the common case, a queue that exists and nobody dropped,
-- it costs one PTTL.
--   queue: ZSET waiter -> arrival sequence
--   alive: ZSET waiter -> liveness deadline (server ms)
-- A waiter (a member of both) is "<id>|<secret>|<TTL ms>|<liveness
-- ms>|<owner>": its id, "<Backend id>:<random>", then what a release needs
-- to grant it the lock (see release.lua).

local dropped = 0

local function wake_prefix(lock)
  return string.match(lock, '^(.-){') .. 'waiters:'
end

local function sweep(queue, alive, now)
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', alive, '-inf', now)) do
    redis.call('ZREM', queue, d)
    redis.call('ZREM', alive, d)
    dropped = dropped + 1
  end
end

local function live_head(queue, alive, self, wake, counted)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  while head and head ~= self do
    local deadline = redis.call('ZSCORE', alive, head)
    if deadline then
      if not wake then
        return head, tonumber(deadline)
      end
      local heard = redis.call('PUBLISH', wake .. string.match(head, '^[^:]*'), string.match(head, '^[^|]*'))
      if heard > 0 or not counted then
        return head, tonumber(deadline)
      end
    end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', alive, head)
    dropped = dropped + 1
    head = redis.call('ZRANGE', queue, 0, 0)[1]
  end
  return head
end

local function keep_queue(queue, alive, live, made)
  local left = redis.call('PTTL', alive)
  if left < 3 * live / 2 then
    redis.call('PEXPIRE', queue, 2 * live)
    redis.call('PEXPIRE', alive, 2 * live)
  elseif (made or dropped > 0) and redis.call('PTTL', queue) < left then
    redis.call('PEXPIRE', queue, left)
  end
end

local function first_live(queue, alive, now, self, wake, counted)
  sweep(queue, alive, now)
  return live_head(queue, alive, self, wake, counted)
end


-- Shared (read) grants, for the scripts of locks (acquire.lua,
-- release.lua, shared_*.lua):
--   readers: ZSET "<secret>|" -> expiry (server ms) of each shared grant
--   grants:  HASH "<secret>|" -> "<token>|<since ms>|<owner>"
-- Both expire with the last shared grant (PEXPIRE at each grant and
-- refresh). A waiter that asks for a shared grant has an id whose random
-- part starts with 's' ("<Backend id>:s<random>"): a random part is
-- otherwise upper case (crypto/rand.Text).
--
-- is_shared(member) tells whether a queue member is a shared waiter.
--
-- live_readers(readers, grants, now) drops the shared grants whose expiry
-- passed by now, and returns the expiry of the first live one, or nil.
--
-- add_reader(readers, grants, member, value, ttl, now) records a shared
-- grant of member ("<secret>|") for ttl ms from now, value being its hash entry, and
-- has both keys expire with their last grant.
--
-- hand_off(keys, now, counted, unshared) grants a free lock to the waiters first in
-- line: the shared waiters at the head, each a shared grant; or, when the
-- first is an exclusive waiter and no shared grant is live (nor was just
-- made), the lock. For each it draws the waiter's token, records the
-- grant with the waiter's secret, TTL and owner, and publishes
-- "<id>|<token>|<ms>" on its wake channel, ms being the server's time
-- since the waiter last refreshed its place (the waiter counts its
-- validity from when it sent that refresh, plus ms). A waiter nobody
-- hears (counted) is dropped, and the next one served. keys are {lock,
-- queue, alive, counter, watch marker, readers, grants}. unshared says
-- that no shared grant can be live (the caller has just released the
-- lock key, whose grant excluded them): the shared grants are then not
-- read. It returns whether it granted the lock to an exclusive waiter,
-- and when it did, whether the key is watched (the watch marker exists),
-- which it reads with the queue in one EXISTS. Commands of a hand-off of
-- the lock to a live first waiter, no shared grant being live: the sweep
-- (ZRANGEBYSCORE), ZPOPMIN, ZSCORE (its liveness), ZREM, INCR, PUBLISH,
-- EXISTS (queue and marker) and SET.

local function is_shared(member)
  return string.find(member, '^[^:|]*:s') ~= nil
end

local function live_readers(readers, grants, now)
  local first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return nil
  end
  if tonumber(first[2]) > now then
    return tonumber(first[2])
  end
  local gone = redis.call('ZRANGEBYSCORE', readers, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  for _, secret in ipairs(gone) do
    redis.call('HDEL', grants, secret)
  end
  first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return nil
  end
  return tonumber(first[2])
end

local function add_reader(readers, grants, member, value, ttl, now)
  redis.call('ZADD', readers, now + ttl, member)
  redis.call('HSET', grants, member, value)
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  local left = math.max(1, tonumber(last[2]) - now)
  redis.call('PEXPIRE', readers, left)
  redis.call('PEXPIRE', grants, left)
end

local function hand_off(keys, now, counted, unshared)
  local lock, queue, alive, counter, watched, readers, grants = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7]
  local wake = wake_prefix(lock)
  local live = not unshared and live_readers(readers, grants, now) ~= nil
  sweep(queue, alive, now)
  while true do
    local head, deadline
    if live then
      -- An exclusive waiter first stays in line: look before taking.
      head, deadline = live_head(queue, alive, nil, nil, false)
      if not head then
        return false
      end
    else
      -- No shared grant is live: whoever is first is served, or
      -- dropped (ZPOPMIN takes the head out of the queue in one step).
      head = redis.call('ZPOPMIN', queue)[1]
      if not head then
        return false
      end
      deadline = redis.call('ZSCORE', alive, head)
    end
    local wid, secret, ttl, lv, owner = string.match(head, '^([^|]*)|([^|]*)|(%d+)|(%d+)|(.*)$')
    local shared = is_shared(head)
    if wid and not shared and live then
      -- An exclusive waiter first, and shared grants live: it waits.
      return false
    end
    if live then
      redis.call('ZREM', queue, head)
    end
    -- A member without a liveness entry (popped) is dropped, as
    -- live_head drops it.
    if deadline then
      redis.call('ZREM', alive, head)
    end
    if wid and deadline then
      local token = redis.call('INCR', counter)
      -- Less a millisecond: both times are whole milliseconds.
      local waited = now - (tonumber(deadline) - tonumber(lv)) - 1
      local heard = redis.call('PUBLISH', wake .. string.match(wid, '^[^:]*'), wid .. '|' .. token .. '|' .. waited)
      if heard > 0 or not counted then
        if shared then
          add_reader(readers, grants, secret .. '|', token .. '|' .. now .. '|' .. owner, tonumber(ttl), now)
          live = true
        else
          -- One EXISTS tells both: the watch marker counts twice. The
          -- grant is waited for if someone waits or watches.
          local e = redis.call('EXISTS', queue, watched, watched)
          local more = '0'
          if e > 0 then more = '1' end
          redis.call('SET', lock, secret .. '|' .. token .. '|' .. now .. '|' .. more .. '|' .. owner, 'PX', ttl)
          return true, e >= 2
        end
      end
    end
  end
end
