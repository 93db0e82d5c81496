-- Judge step events of one funnel (events.funnel_steps, docs/events.md "Funnels"): keep each visitor's
-- step events in its state, recompute its attempts from the whole state, and correct the day
-- results by the difference, at most once per call id. Every key is in the funnel's hash tag.
-- KEYS: the call's dedupe marker (`<base>seen:<call id>`).
-- Times are whole microseconds (us) since the epoch: exact in a Lua number, and a step event's
-- name, `<ts: 16 digits>|<mask: 3 digits>|<local day of ts>`, sorts as (ts, mask, day) as text.
-- ARGV: marker TTL (0 = no dedupe), now (us), W (the funnel's window, us), L (the lateness
--       allowance, us), clock tolerance (us), n steps, the state's cap (entries), seconds a day's
--       figures are kept after the day's first attempt, base (`ct:fun:{tag}:`, the keys' common
--       start), then n step windows (us; 0: none), then nb, nb bucket bounds (us, ascending),
--       then the most seconds a visitor's state outlives its latest step event (COUNTERS_VISITOR_DAYS),
--       then per visitor: its id, m, then m step event names (mask: bit k-1 for step k).
-- Keys made from base: `v:<visitor>` (HASH state: `a` the time up to which attempts were
-- pruned, `d` the days of its live attempts, a step event's name -> multiplicity), `res:<D>`
-- (HASH visitor -> `f|t0|b2,b3,...`: its furthest step of day D, the chosen attempt's start and
-- time buckets; `<visitor>!` -> the same of its attempts of D that are over for good), `step:<D>:<k>` (SET of visitors at step k on day D), `day:<D>` (HASH `h<k>:<b>`
-- -> visitors, `late`, `capped`).
-- Returns {visitors recomputed, late entries, capped entries}, or -1 when the call was applied.
local ttl = tonumber(ARGV[1])
local go, marker_refused = dedupe_marker_claim(KEYS[1], ttl)
if not go then
  return marker_refused or -1
end
local now, W, L, tol = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n, cap, keep, base = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local win = {}
for k = 1, n do
  win[k] = tonumber(ARGV[9 + k])
end
local at = 10 + n
local nb = tonumber(ARGV[at])
local bounds = {}
for i = 1, nb do
  bounds[i] = tonumber(ARGV[at + i])
end
at = at + nb + 1
local state_days_s = tonumber(ARGV[at])  -- (s) a state never outlives its latest step event by more
at = at + 1
local cutoff = now - W - L       -- older step events are not judged (late)
local final = cutoff - tol       -- an attempt that ended before this can no longer change
local US = 1000000
local result_ttl = 90000 + (2 * W + L + tol) / US  -- (s) a day's results may change until its end + 2W + L

local function parse_name(name)  -- a step event's name -> {ts, mask, day}
  return { tonumber(string.sub(name, 1, 16)), tonumber(string.sub(name, 18, 20)), string.sub(name, 22) }
end

local function bucket(d)
  for i = 1, nb do
    if d <= bounds[i] then
      return i
    end
  end
  return nb + 1
end

local clock = tonumber(redis.call('TIME')[1])  -- the server's, which its expiries go by
local function expire_at(key, when)  -- push a key's expiry (epoch s) later, never earlier
  local left = redis.call('TTL', key)
  if left < 0 or clock + left < when then
    redis.call('EXPIREAT', key, math.ceil(when))
  end
end

local function parse_record(text)  -- `f|t0|b2,b3,...` -> f, t0, {buckets by step}
  if not text then
    return 0, nil, {}
  end
  local f, t0, rest = string.match(text, '^(%d+)|(%d+)|(.*)$')
  local buckets, k = {}, 2
  for b in string.gmatch(rest, '%d+') do
    buckets[k] = tonumber(b)
    k = k + 1
  end
  return tonumber(f), tonumber(t0), buckets
end

local function record_of(text)  -- an outcome {f, t0, buckets}, or nil
  if not text then
    return nil
  end
  local f, t0, buckets = parse_record(text)
  return { f, t0, buckets }
end

local function text_of(outcome)  -- `f|t0|b2,b3,...`
  local parts = {}
  for k = 2, outcome[1] do
    parts[#parts + 1] = tostring(outcome[3][k])
  end
  return outcome[1] .. '|' .. string.format('%d', outcome[2]) .. '|' .. table.concat(parts, ',')
end

local function better(a, b)  -- the outcome that reached further; of two as far, the earlier
  if not a then
    return b
  end
  if not b or a[1] > b[1] or (a[1] == b[1] and a[2] <= b[2]) then
    return a
  end
  return b
end

local function credit(v, day, old_text, f, t0, buckets)  -- correct day D's figures by the difference
  local new_text = nil
  if f > 0 then
    new_text = text_of({ f, t0, buckets })
  end
  if new_text == old_text then
    return
  end
  local of, _, ob = parse_record(old_text)
  local day_key = base .. 'day:' .. day
  for k = 1, math.max(of, f) do
    local set = base .. 'step:' .. day .. ':' .. k
    if k <= f and k > of then
      redis.call('SADD', set, v)
      expire_at(set, t0 / US + keep)
    elseif k > f and k <= of then
      redis.call('SREM', set, v)
    end
    if k >= 2 then
      local before = k <= of and ob[k] or nil
      local after = k <= f and buckets[k] or nil
      if before ~= after then
        if before then
          redis.call('HINCRBY', day_key, 'h' .. k .. ':' .. before, -1)
        end
        if after then
          redis.call('HINCRBY', day_key, 'h' .. k .. ':' .. after, 1)
        end
      end
    end
  end
  if f > 0 then
    expire_at(day_key, t0 / US + keep)
  end
  local res = base .. 'res:' .. day
  if new_text then
    redis.call('HSET', res, v, new_text)
    expire_at(res, t0 / US + result_ttl)
  else
    redis.call('HDEL', res, v)
  end
end

local recomputed, late_total, capped_total = 0, 0, 0
while at <= #ARGV do
  local v, m = ARGV[at], tonumber(ARGV[at + 1])
  at = at + 2
  local skey = base .. 'v:' .. v
  local stored = redis.call('HGETALL', skey)
  local after, live_days, entries, size = nil, '', {}, 0
  for i = 1, #stored, 2 do
    local name = stored[i]
    if name == 'a' then
      after = tonumber(stored[i + 1])
    elseif name == 'd' then
      live_days = stored[i + 1]
    else
      entries[name] = tonumber(stored[i + 1])
      size = size + 1
    end
  end
  if after == nil then
    after = final  -- a new (or expired) state: every attempt before it is over
  end
  local added, changed = false, {}
  for i = at, at + m - 1 do
    local name = ARGV[i]
    local e = parse_name(name)
    local ts, day = e[1], e[3]
    if ts < cutoff or ts <= after then
      redis.call('HINCRBY', base .. 'day:' .. day, 'late', 1)
      expire_at(base .. 'day:' .. day, ts / US + keep)
      late_total = late_total + 1
    elseif entries[name] then
      entries[name] = entries[name] + 1
      changed[name] = true
      added = true
    elseif size >= cap then
      redis.call('HINCRBY', base .. 'day:' .. day, 'capped', 1)
      expire_at(base .. 'day:' .. day, ts / US + keep)
      capped_total = capped_total + 1
    else
      entries[name] = 1
      changed[name] = true
      size = size + 1
      added = true
    end
  end
  at = at + m
  if added then
    recomputed = recomputed + 1
    -- the visitor's step events by time (ties by mask, then day: any order of arrival sorts alike)
    local names = {}
    for name, _ in pairs(entries) do
      names[#names + 1] = name
    end
    table.sort(names)  -- as text: by (ts, mask, day)
    local list = {}
    for _, name in ipairs(names) do
      local e = parse_name(name)
      for _ = 1, entries[name] do
        list[#list + 1] = e
      end
    end
    -- attempts: a step-1 event after the last attempt's window opens the next one
    local starts, open_end = {}, after
    for i, e in ipairs(list) do
      if e[2] % 2 == 1 and e[1] > open_end then
        starts[#starts + 1] = i
        open_end = e[1] + W
      end
    end
    local best, best_days, ended, live_set, pruned_to = {}, {}, {}, {}, after
    for _, i0 in ipairs(starts) do
      local t0 = list[i0][1]
      local used, times, prev, lo = { [i0] = true }, { t0 }, t0, i0
      while lo > 1 and list[lo - 1][1] >= t0 do
        lo = lo - 1
      end
      for k = 2, n do
        local bit_k, found = 2 ^ (k - 1), nil
        for j = lo, #list do
          local e = list[j]
          if e[1] - t0 > W or (win[k] > 0 and e[1] - prev > win[k]) then
            break
          end
          if not used[j] and bit.band(e[2], bit_k) ~= 0 then
            found = j
            break
          end
        end
        if not found then
          break
        end
        used[found] = true
        prev = list[found][1]
        times[k] = prev
        while list[lo][1] < prev do
          lo = lo + 1
        end
      end
      local day, f = list[i0][3], #times
      local over = t0 + W < final  -- over for good: its result is final, its entries go
      if not best[day] or f > best[day][1] or (over and (not ended[day] or f > ended[day][1])) then
        local buckets = {}
        for k = 2, f do
          buckets[k] = bucket(times[k] - times[k - 1])
        end
        local outcome = { f, t0, buckets }
        if not best[day] then
          best_days[#best_days + 1] = day
        end
        if not best[day] or f > best[day][1] then
          best[day] = outcome
        end
        if over and (not ended[day] or f > ended[day][1]) then
          ended[day] = outcome
        end
      end
      if over then
        pruned_to = math.max(pruned_to, t0 + W)
      else
        live_set[day] = true
      end
    end
    if #starts == 0 or list[starts[#starts]][1] + W < final then
      pruned_to = math.max(pruned_to, final)  -- no live attempt: nothing before final can count again
    end
    -- each day of an attempt, and each day of a live attempt before: its result corrected. A
    -- day's outcome is the best of its attempts in the state and of its attempts over for good
    -- (the field `<visitor>!` of res:<D>, and a credited outcome whose attempt left the state).
    local seen, days = {}, {}
    for _, day in ipairs(best_days) do
      seen[day] = true
      days[#days + 1] = day
    end
    for day in string.gmatch(live_days, '[^,]+') do
      if not seen[day] then
        seen[day] = true
        days[#days + 1] = day
      end
    end
    local live = {}
    for _, day in ipairs(days) do
      local res = base .. 'res:' .. day
      local stored_res = redis.call('HMGET', res, v, v .. '!')
      local old_text = stored_res[1] or nil
      local fixed_text = stored_res[2] or nil
      local fixed = record_of(fixed_text)
      local old = record_of(old_text)
      if old and old[2] <= after then  -- credited from an attempt that has left the state
        fixed = better(fixed, old)
      end
      local outcome = better(fixed, best[day])
      if ended[day] then
        local now_fixed = better(fixed, ended[day])
        if now_fixed ~= fixed then
          redis.call('HSET', res, v .. '!', text_of(now_fixed))
          expire_at(res, now_fixed[2] / US + result_ttl)
        end
      end
      if outcome then
        credit(v, day, old_text, outcome[1], outcome[2], outcome[3])
      elseif old_text then
        credit(v, day, old_text, 0, nil, {})
      end
      if live_set[day] then
        live[#live + 1] = day
      end
    end
    -- the state: entries after the pruned attempts, expiring at the latest + 2W + L
    local latest = nil
    local remove = {}
    for _, name in ipairs(names) do
      local ts = tonumber(string.sub(name, 1, 16))
      if ts <= pruned_to then
        remove[#remove + 1] = name
        entries[name] = nil
      else
        latest = ts  -- (names in time order: the last kept is the latest)
      end
    end
    if latest == nil then
      redis.call('DEL', skey)
    else
      if #remove > 0 then
        for from = 1, #remove, 500 do
          redis.call('HDEL', skey, unpack(remove, from, math.min(from + 499, #remove)))
        end
      end
      local fields = { 'a', string.format('%d', pruned_to), 'd', table.concat(live, ',') }
      for name, _ in pairs(changed) do
        if entries[name] then
          fields[#fields + 1] = name
          fields[#fields + 1] = entries[name]
        end
      end
      redis.call('HSET', skey, unpack(fields))
      redis.call('EXPIREAT', skey, math.ceil(math.min((latest + 2 * W + L + tol) / US, latest / US + state_days_s)))
    end
  end
end
return { recomputed, late_total, capped_total }
