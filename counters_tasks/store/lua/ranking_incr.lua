-- Add amounts to members of one board, each in the time slot of its bump, at most once per
-- message.
-- KEYS: the board's meta HASH, top ZSET, slot index ZSET, then k slot HASHes, then (when
--       ARGV[1] > 0) the message's dedupe marker. All share the board's hash tag.
-- ARGV: marker TTL (0 = no dedupe), period_hours, interval_hours, slot hash TTL in seconds,
--       the writer's clock slot (the slot of its current time), k, the k slot numbers (in KEYS
--       order), then n, then per bump: the index (1..k) of its slot, member, amount, -amount
--       (as text: a Lua number would lose digits past 14).
-- Bumps are applied in order, each as a single incr would be. A bump is late when its slot is
-- out of the window ending at the board's watermark (the newest slot written), or at the clock
-- slot when the watermark is ahead of it: a bump from a clock running ahead can move the
-- watermark, never make current bumps late.
-- Invariant kept by every ranking script: top[m] = -(sum of m over the slot hashes in the index),
-- zero totals absent; an index entry exists exactly when its slot hash does.
-- The board's meta keeps the writer's clock slot of its latest write (lw): idle boards expire.
-- Every key's type is checked before the first write (wrong_type; the meta HASH by HMGET), and
-- that no slot field would pass the 64-bit range (by the read of the slots' members).
-- Returns {status, 1 when the board is not yet confirmed in the registry (meta.reg unset) else 0,
-- bumps ignored as late}; status 1 applied, 0 already applied (same message), 2 every bump
-- late, -1 the board exists with other settings, -5 the board is being rebuilt or deleted (the
-- caller finishes that, then sends again; nothing written in either case).
local ttl = tonumber(ARGV[1])
local meta = redis.call('HMGET', KEYS[1], 'period', 'interval', 'wm', 'rot', 'reg', 'rb', 'del', 'lw')
if meta[6] or meta[7] then
  return {-5, 0, 0}
end
local unregistered = meta[5] and 0 or 1
if meta[1] and (meta[1] ~= ARGV[2] or meta[2] ~= ARGV[3]) then
  return {-1, 0, 0}
end
local clock = tonumber(ARGV[5])
local k = tonumber(ARGV[6])
local types = {KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4 + k] or KEYS[2], KEYS[4 + k] and 'string' or 'zset'}
for s = 1, k do
  types[#types + 1] = KEYS[3 + s]
  types[#types + 1] = 'hash'
end
local refused = wrong_type(types)
if refused then
  return refused
end
if ttl > 0 and redis.call('EXISTS', KEYS[4 + k]) == 1 then
  return {0, unregistered, 0}
end
local per_slot = {}
for e = 8 + k, 7 + k + 4 * tonumber(ARGV[7 + k]), 4 do  -- late bumps add nothing: a bound, not exact
  local s, member = tonumber(ARGV[e]), ARGV[e + 1]
  per_slot[s] = per_slot[s] or {}
  per_slot[s][member] = (per_slot[s][member] or 0) + tonumber(ARGV[e + 2])
end
-- every slot's members read once (one HMGET a slot per 1,000): the overflow check, then the
-- totals the writes below start from
local held = {}  -- slot index -> member -> its stored value (false when absent)
for s, sums in pairs(per_slot) do
  local fields, adds = {}, {}
  for member, sum in pairs(sums) do
    fields[#fields + 1] = member
    adds[#adds + 1] = sum
  end
  local of_slot = {}
  held[s] = of_slot
  local values = hash_total_read(KEYS[3 + s], fields)  -- (its type was checked above)
  for f = 1, #fields do
    local total, refused_total = hash_total(KEYS[3 + s], fields[f], values[f], adds[f])
    if not total then
      return refused_total
    end
    of_slot[fields[f]] = values[f]
  end
end
if ttl > 0 then
  redis.call('SET', KEYS[4 + k], '1', 'EX', ttl)
end
if not meta[1] then
  redis.call('HSET', KEYS[1], 'period', ARGV[2], 'interval', ARGV[3])
end
if not meta[8] or tonumber(meta[8]) < clock then
  redis.call('HSET', KEYS[1], 'lw', ARGV[5])
end
local window = tonumber(ARGV[2]) / tonumber(ARGV[3])
local wm = tonumber(meta[3])
local wm_text = nil  -- the watermark to write, when a bump moved it
local rot = tonumber(meta[4])
local late = 0
-- First every bump in order, deciding whether it is late (the watermark moves as it would one
-- by one), its amount summed per (slot, member) and per member for the top: a member seen
-- several times costs one HINCRBY a slot and one ZINCRBY, not two commands a bump (the end
-- state is the same: additions commute). Once a member's amounts could add up past 2**53 (a Lua
-- number's exact range), its further bumps are not summed but go one by one, as text.
local EXACT = 9007199254740991
local sums, bound, one_by_one = {}, {}, {}
local bumps = tonumber(ARGV[7 + k])
local i = 8 + k
for _ = 1, bumps do
  local s = tonumber(ARGV[i])
  local slot = tonumber(ARGV[6 + s])
  local member, amount = ARGV[i + 1], ARGV[i + 2]
  local reference = wm
  if reference and clock < reference then
    reference = clock
  end
  if (reference and slot <= reference - window) or (rot and slot < rot) then
    late = late + 1
  else
    if not wm or slot > wm then
      wm = slot
      wm_text = ARGV[6 + s]
    end
    local per = sums[s]
    if not per then
      per = {}
      sums[s] = per
    end
    local magnitude = (bound[member] or 0) + math.abs(tonumber(amount))
    bound[member] = magnitude
    if magnitude > EXACT then
      one_by_one[#one_by_one + 1] = {s, member, amount, ARGV[i + 3]}
    else
      per[member] = (per[member] or 0) + tonumber(amount)
    end
  end
  i = i + 4
end
if wm_text then
  redis.call('HSET', KEYS[1], 'wm', wm_text)
end
-- A slot's new totals go in one HSET (and its emptied members in one HDEL), summed here from
-- the totals read above (hash_total); the top's in one ZMSCORE and one ZADD (scores are doubles in Redis too: the same sums
-- ZINCRBY would make), its zeros in one ZREM.
local top, movers = {}, {}  -- member -> what its top score moves by (the negated sum over slots)
for s, per in pairs(sums) do
  local sets, dels = {}, {}
  for member, sum in pairs(per) do
    if sum ~= 0 then
      local total, how = hash_total(KEYS[3 + s], member, held[s][member], sum)
      if how == 'add' then  -- past 2**53 (never 0)
        redis.call('HINCRBY', KEYS[3 + s], member, string.format('%.0f', sum))
      elseif total == 0 then
        dels[#dels + 1] = member
      else
        sets[#sets + 1] = member
        sets[#sets + 1] = hash_total_text(total)
      end
      if not top[member] then
        movers[#movers + 1] = member
      end
      top[member] = (top[member] or 0) - sum
    end
  end
  hash_total_send('HSET', KEYS[3 + s], sets, 2000)
  hash_total_send('HDEL', KEYS[3 + s], dels, 1000)
end
for first = 1, #movers, 1000 do
  local part = {unpack(movers, first, math.min(first + 999, #movers))}
  local scores = redis.call('ZMSCORE', KEYS[2], unpack(part))
  local adds, zeros = {}, {}
  for m = 1, #part do
    local score = (tonumber(scores[m]) or 0) + top[part[m]]
    if score == 0 then
      zeros[#zeros + 1] = part[m]
    else
      adds[#adds + 1] = score
      adds[#adds + 1] = part[m]
    end
  end
  if #adds > 0 then
    redis.call('ZADD', KEYS[2], unpack(adds))
  end
  if #zeros > 0 then
    redis.call('ZREM', KEYS[2], unpack(zeros))
  end
end
for _, bump in ipairs(one_by_one) do
  local key = KEYS[3 + bump[1]]
  if redis.call('HINCRBY', key, bump[2], bump[3]) == 0 then
    redis.call('HDEL', key, bump[2])
  end
  if tonumber(redis.call('ZINCRBY', KEYS[2], bump[4], bump[2])) == 0 then
    redis.call('ZREM', KEYS[2], bump[2])
  end
end
-- the slot index follows the slot hashes this call touched (once per slot, not per bump: a
-- slot of a non-late bump has its table in sums)
for s in pairs(sums) do
  if redis.call('EXISTS', KEYS[3 + s]) == 1 then
    redis.call('ZADD', KEYS[3], ARGV[6 + s], ARGV[6 + s])
    redis.call('EXPIRE', KEYS[3 + s], ARGV[4])
  else
    redis.call('ZREM', KEYS[3], ARGV[6 + s])
  end
end
if late > 0 then
  redis.call('HINCRBY', KEYS[1], 'late', late)
end
if late == bumps then
  return {2, unregistered, late}
end
return {1, unregistered, late}
