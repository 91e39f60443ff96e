import { DAY, MINUTE } from "../core/limits/windows.js";
import { EXPIRE_BATCH, RESERVED_RETRY_MS } from "./limits-store.js";

/**
 * The Lua of the Redis limits store: one script per decision, so checking every window and the
 * spend cap, counting and reserving happen atomically, with one round trip. The algorithm is the
 * memory store's (src/stores/memory-limits-store.ts), and the window shapes come from
 * src/core/limits/windows.ts.
 *
 * A window is a hash: field `o` = the oldest bucket counted, `t` = the running total, `u` = a
 * memo of when a rejecting window frees (limit:free-at-ms:newest-bucket; dropped on every
 * count), and one field per bucket. Numbers are written with %.0f: Lua numbers are doubles, and
 * Redis would otherwise print large ones with an exponent.
 */
const common = `
local function s(n) return string.format('%.0f', n) end

local function now_ms(arg)
  local n = tonumber(arg)
  if n >= 0 then return n end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops the buckets that left the window at bucket cur; returns the count still in it and the
-- bucket to count in (time never steps back behind the newest bucket).
local function load(key, cur, n)
  local head = redis.call('HMGET', key, 'o', 't')
  local o = tonumber(head[1])
  if not o then return 0, cur end
  if cur < o + n then cur = o + n end
  local lo = cur - n
  if lo - o > n then
    redis.call('DEL', key)
    return 0, cur
  end
  local total = tonumber(head[2]) or 0
  if lo > o then
    if lo - o > 64 then
      -- a long idle gap: visit the buckets that exist rather than every index in it
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local b = tonumber(f)
        if b and b < lo then
          total = total - tonumber(redis.call('HGET', key, f))
          redis.call('HDEL', key, f)
        end
      end
    else
      for b = o, lo - 1 do
        local c = redis.call('HGET', key, s(b))
        if c then
          total = total - tonumber(c)
          redis.call('HDEL', key, s(b))
        end
      end
    end
    redis.call('HSET', key, 'o', s(lo), 't', s(total))
  end
  return total, cur
end

-- Ends a reservation: its amount leaves the total, and the buckets it was counted in (id..':c') go.
local function release(zkey, hkey, id)
  local amt = redis.call('HGET', hkey, id)
  if amt then
    -- Redis reads '-0' as no integer: a rescindable admission may have reserved nothing.
    if amt ~= '0' then redis.call('HINCRBY', hkey, 'total', '-' .. amt) end
    redis.call('HDEL', hkey, id, id .. ':c')
  end
  redis.call('ZREM', zkey, id)
end

-- Reservations that were never settled (their process died) stop counting when they expire.
local function expire(zkey, hkey, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', zkey, '-inf', s(now), 'LIMIT', 0, ${EXPIRE_BATCH})) do
    release(zkey, hkey, id)
  end
end
`;

/**
 * KEYS: minute, day, user-minute windows, the month's spend, reservations (zset by expiry, hash of
 * amounts with the running `total`). ARGV: now ms (-1: Redis's clock), the three limits (-1: none),
 * cap nano (-1: none), worst-case nano, reservation id, reservation ttl ms, month end ms,
 * recorded ('1': rescindable: record the reservation, and the buckets counted as `<id>:c` =
 * "m,d,u"; '2': the same, as "m,d,u,k", which only a take-back (rescind's ARGV[3] '1') may take
 * back; '0': only a reservation of a worst case above 0, without its buckets). An admission
 * counted in a user's window has that window's key after `|`: only a rescind for that user takes
 * it back.
 * Returns {allowed, window (1 minute, 2 day, 3 user, 4 month), limit, remaining, reset ms,
 * retry ms, cap left in nano or false}; a spend-cap refusal's limit, remaining and reset are the
 * tightest request window's (0 when none applies; a reset of 0 when nothing is counted in it).
 */
export const admitLua = `${common}
local function free_at(key, total, limit, ms, n, cur)
  local memo = redis.call('HGET', key, 'u')
  if memo then
    local l, f, nw = string.match(memo, '^(%d+):(%d+):(%d+)$')
    if tonumber(l) == limit then return tonumber(f), tonumber(nw) end
  end
  local flat = redis.call('HGETALL', key)
  local buckets = {}
  for i = 1, #flat, 2 do
    local b = tonumber(flat[i])
    if b then buckets[#buckets + 1] = { b, tonumber(flat[i + 1]) } end
  end
  table.sort(buckets, function(x, y) return x[1] < y[1] end)
  local newest = cur
  if #buckets > 0 then newest = buckets[#buckets][1] end
  local free = (newest + n + 1) * ms
  local need, acc = total - limit + 1, 0
  for _, bc in ipairs(buckets) do
    acc = acc + bc[2]
    if acc >= need then
      free = (bc[1] + n + 1) * ms
      break
    end
  end
  redis.call('HSET', key, 'u', s(limit) .. ':' .. s(free) .. ':' .. s(newest))
  return free, newest
end

local now = now_ms(ARGV[1])
local shapes = { { ${MINUTE.bucketMs}, ${MINUTE.buckets} }, { ${DAY.bucketMs}, ${DAY.buckets} }, { ${MINUTE.bucketMs}, ${MINUTE.buckets} } }
local checks = {}
for i = 1, 3 do
  local limit = tonumber(ARGV[i + 1])
  if limit >= 0 then
    local ms, n = shapes[i][1], shapes[i][2]
    local total, cur = load(KEYS[i], math.floor(now / ms), n)
    checks[#checks + 1] = { i, KEYS[i], limit, ms, n, total, cur }
  end
end
expire(KEYS[5], KEYS[6], now)

local worst_case
local function reject(w, limit, reset, retry, room)
  if not worst_case or retry > worst_case[5] then worst_case = { w, limit, 0, reset, retry, room } end
end
for _, c in ipairs(checks) do
  local w, key, limit, ms, n, total, cur = unpack(c)
  if total >= limit then
    local free, newest = free_at(key, total, limit, ms, n, cur)
    reject(w, limit, (newest + n + 1) * ms - now, free - now, false)
  end
end
local cap, worst = tonumber(ARGV[5]), tonumber(ARGV[6])
local room
if cap >= 0 then
  local spent = tonumber(redis.call('GET', KEYS[4]) or '0')
  local reserved = tonumber(redis.call('HGET', KEYS[6], 'total') or '0')
  room = cap - spent - reserved
  -- A worst case of nothing (a cache hit, a model priced 0) cannot pass the cap: never refused.
  if worst > 0 and worst > room then
    -- Refused for what requests in flight hold, which they settle soon: retry in seconds
    -- (RESERVED_RETRY_MS, limits-store.ts); for what is spent, when the month ends.
    local wait = ${RESERVED_RETRY_MS}
    if worst > cap - spent then wait = tonumber(ARGV[9]) - now end
    reject(4, 0, wait, wait, s(math.max(room, 0)))
  end
end
if worst_case then
  if worst_case[1] == 4 then
    -- A spend-cap refusal still reports the tightest request window (this request not counted).
    for _, c in ipairs(checks) do
      local w, key, limit, ms, n, total, cur = unpack(c)
      local remaining = math.max(limit - total, 0)
      -- A window with nothing counted is fully replenished now.
      local reset = 0
      if total > 0 then reset = (cur + n + 1) * ms - now end
      if worst_case[2] == 0 or remaining < worst_case[3] or (remaining == worst_case[3] and reset > worst_case[4]) then
        worst_case[2], worst_case[3], worst_case[4] = limit, remaining, reset
      end
    end
  end
  return { 0, worst_case[1], worst_case[2], worst_case[3], worst_case[4], worst_case[5], worst_case[6] }
end

local tight = { 0, 0, 0, 0 }
local counted = { '', '', '' }
for _, c in ipairs(checks) do
  local w, key, limit, ms, n, total, cur = unpack(c)
  counted[w] = s(cur)
  redis.call('HINCRBY', key, s(cur), 1)
  redis.call('HINCRBY', key, 't', 1)
  redis.call('HSETNX', key, 'o', s(cur - n))
  redis.call('HDEL', key, 'u')
  redis.call('PEXPIRE', key, (n + 2) * ms)
  local remaining = limit - total - 1
  local reset = (cur + n + 1) * ms - now
  -- Of windows with as much left, the one that refills last: its reset is when that much is back.
  if tight[1] == 0 or remaining < tight[3] or (remaining == tight[3] and reset > tight[4]) then tight = { w, limit, remaining, reset } end
end
local recorded = ARGV[10]
if worst > 0 or recorded ~= '0' then
  local ttl = tonumber(ARGV[8])
  redis.call('ZADD', KEYS[5], s(now + ttl), ARGV[7])
  redis.call('HSET', KEYS[6], ARGV[7], ARGV[6])
  -- Counted in a user's window: that window's key follows, so only that user's Rescind takes it back.
  local who = ''
  if counted[3] ~= '' then who = '|' .. KEYS[3] end
  if recorded == '1' then redis.call('HSET', KEYS[6], ARGV[7] .. ':c', table.concat(counted, ',') .. who) end
  if recorded == '2' then redis.call('HSET', KEYS[6], ARGV[7] .. ':c', table.concat(counted, ',') .. ',k' .. who) end
  redis.call('HINCRBY', KEYS[6], 'total', ARGV[6])
  redis.call('PEXPIRE', KEYS[5], ttl + 60000)
  redis.call('PEXPIRE', KEYS[6], ttl + 60000)
end
local left = false
if room then left = s(room - worst) end
return { 1, tight[1], tight[2], tight[3], tight[4], 0, left }
`;

/**
 * KEYS: reservations zset, reservations hash, the month's spend. ARGV: reservation id (may be
 * empty), cost nano, seconds to keep the month's spend.
 */
export const settleLua = `${common}
if ARGV[1] ~= '' then
  release(KEYS[1], KEYS[2], ARGV[1])
end
if ARGV[2] ~= '0' then
  redis.call('INCRBY', KEYS[3], ARGV[2])
  redis.call('EXPIRE', KEYS[3], ARGV[3])
end
return 1
`;

/**
 * KEYS: minute, day, user-minute windows, reservations zset, reservations hash. ARGV: reservation
 * id, now ms (-1: Redis's clock), take-back ('1': any admission recorded with its buckets, also one
 * recorded only for a take-back). Takes back a rescindable admission still outstanding: one count
 * off each bucket it was counted in that is still counted, and its reservation released.
 * Returns 1, or 0 when there was none (so a second call, or one for an admission that never ran,
 * changes nothing).
 */
export const rescindLua = `${common}
expire(KEYS[4], KEYS[5], now_ms(ARGV[2]))
local counted = redis.call('HGET', KEYS[5], ARGV[1] .. ':c')
if not counted then return 0 end
local m, d, u, kept, who = string.match(counted, '^(%d*),(%d*),(%d*)(,?k?)|?(.*)$')
if kept == ',k' and ARGV[3] ~= '1' then return 0 end
if who ~= '' and who ~= KEYS[3] then return 0 end
release(KEYS[4], KEYS[5], ARGV[1])
local buckets = { m, d, u }
for i = 1, 3 do
  local b = buckets[i]
  if b and b ~= '' then
    -- A bucket that has left its window was dropped when the window moved past it.
    local n = tonumber(redis.call('HGET', KEYS[i], b))
    if n and n > 0 then
      redis.call('HINCRBY', KEYS[i], b, -1)
      redis.call('HINCRBY', KEYS[i], 't', -1)
      redis.call('HDEL', KEYS[i], 'u')
    end
  end
end
return 1
`;

/** KEYS: minute, day, the month's spend, reservations zset, reservations hash. ARGV: now ms (-1: Redis's clock). */
export const usageLua = `${common}
local now = now_ms(ARGV[1])
expire(KEYS[4], KEYS[5], now)
local m = load(KEYS[1], math.floor(now / ${MINUTE.bucketMs}), ${MINUTE.buckets})
local d = load(KEYS[2], math.floor(now / ${DAY.bucketMs}), ${DAY.buckets})
return { m, d, redis.call('GET', KEYS[3]) or '0', redis.call('HGET', KEYS[5], 'total') or '0' }
`;
