-- Add counts to the buckets of counters of one tag group, every precision, at most once per
-- message, and keep the group's due index.
-- KEYS: per counter, its HASH then its due ZSET (one of the group's DUE_SUBSETS); then the
--       group's due summary ZSET; then (when ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), the number of counters, then per counter (KEYS
--       order): its member in the due index, its subset number, the earliest time one of these
--       buckets leaves the window, n, then n pairs of field (bucket_start / precision * 10 +
--       precision index), amount (each field once).
-- A bucket brought back to zero by a correction is removed (only non-zero buckets are kept); a
-- counter left with no bucket leaves the due index, any other gets the earlier of its score
-- and these buckets' (ZADD LT), and so does its subset in the summary, so the cleaner finds it
-- when its first sample is due. (Subsets keep each due ZSET small enough to stay a listpack.)
-- A counter costs one HMGET and one HSET however many buckets it adds to (not an HINCRBY a
-- bucket): the new totals are summed here (hash_total: exact, and what HINCRBY would refuse
-- refused before the first write).
-- The marker is set first (SET NX: one command says whether this message was applied here; a
-- TYPE only when it was or the key is not a marker) and taken back on a refusal. Everything
-- that can fail comes before the first bucket is written: a counter's HASH is checked by its
-- HMGET, its stored totals must be integers, a total must stay inside 9.2e18; a due ZSET of an
-- emptied counter by a ZSCORE, the others and the summary by their ZADD. A refusal fails the
-- call with no bucket written and no marker (a due score written before it is only early: the
-- cleaner visits that counter once for nothing).
-- Returns 1, or 0 when this message was already applied here (nothing written).
local ttl = tonumber(ARGV[1])
local ncounters = tonumber(ARGV[2])
local summary = KEYS[2 * ncounters + 1]
local marker = KEYS[2 * ncounters + 2]
local claimed, refused_marker = dedupe_marker_claim(marker, ttl)
if not claimed then
  return refused_marker or 0
end

local function refuse(reply)  -- nothing but the marker (and early due scores) written: take it back
  return dedupe_marker_release(marker, ttl, reply)
end

-- reads: each counter's buckets, and what to write to them
local plans = {}  -- per counter: {sets (flat field, total), dels, bigs (flat field, amount)}
local fresh, emptied = {}, {}  -- per counter: a bucket of it is new; a correction empties one
local i = 3
for c = 1, ncounters do
  local key = KEYS[2 * c - 1]
  local n = tonumber(ARGV[i + 3])
  local first = i + 4
  local sets, dels, bigs, fields = {}, {}, {}, {}
  for a = 1, n do
    fields[a] = ARGV[first + 2 * a - 2]
  end
  local held, failed = hash_total_read(key, fields)
  if not held then
    return refuse(wrong_type({key, 'hash'}) or redis.error_reply(failed['err']))
  end
  for a = 1, n do
    local field, amount = fields[a], ARGV[first + 2 * a - 1]
    local total, how
    if not held[a] and #amount < 16 and amount ~= '0' then  -- a new bucket of an integer under 10^15 (< 2^53):
      how = 'new'  -- written as sent, with no number made and formatted again
    else
      total, how = hash_total(key, field, held[a], tonumber(amount))
    end
    if how == 'new' then
      sets[#sets + 1] = field
      sets[#sets + 1] = amount
      fresh[c] = true
    elseif not total then
      return refuse(how)
    elseif how == 'add' then  -- never 0, never a new bucket
      bigs[#bigs + 1] = field
      bigs[#bigs + 1] = amount
    elseif total == 0 then
      if held[a] then
        dels[#dels + 1] = field
        emptied[c] = true
      end
    else
      sets[#sets + 1] = field
      sets[#sets + 1] = hash_total_text(total)
      if not held[a] then
        fresh[c] = true
      end
    end
  end
  plans[c] = {sets, dels, bigs}
  i = first + 2 * n
end

-- the due entries: an emptied counter's due ZSET checked by a read, every other by its ZADD
local subsets, subsets_due = {}, {}  -- the subsets whose summary entry may move, and to when
i = 3
for c = 1, ncounters do
  local due, member, subset, first_due = KEYS[2 * c], ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 4 + 2 * tonumber(ARGV[i + 3])
  if emptied[c] then
    local _, refused = wrong_type_read('zset', 'ZSCORE', due, member)
    if refused then
      return refuse(refused)
    end
  end
  if fresh[c] or emptied[c] then
    local changed = redis.pcall('ZADD', due, 'LT', 'CH', first_due, member)
    if type(changed) == 'table' and changed['err'] then
      return refuse(wrong_type({due, 'zset'}) or redis.error_reply(changed['err']))
    end
    if changed == 1 then  -- new, or due earlier: its subset's summary entry too (one ZADD below)
      local earliest = subsets_due[subset]
      if not earliest then
        subsets[#subsets + 1] = subset
      end
      if not earliest or tonumber(first_due) < earliest then
        subsets_due[subset] = tonumber(first_due)
      end
    end
  end
end
if #subsets > 0 then
  local entries = {}
  for _, subset in ipairs(subsets) do
    entries[#entries + 1] = string.format('%.0f', subsets_due[subset])
    entries[#entries + 1] = subset
  end
  local moved = redis.pcall('ZADD', summary, 'LT', unpack(entries))
  if type(moved) == 'table' and moved['err'] then
    return refuse(wrong_type({summary, 'zset'}) or redis.error_reply(moved['err']))
  end
end

-- writes: nothing below can fail (types and totals checked above)
for c = 1, ncounters do
  local key, plan = KEYS[2 * c - 1], plans[c]
  hash_total_send('HSET', key, plan[1], 2000)
  hash_total_send('HDEL', key, plan[2], 1000)
  for b = 1, #plan[3], 2 do
    redis.call('HINCRBY', key, plan[3][b], plan[3][b + 1])
  end
end
i = 3
for c = 1, ncounters do
  if emptied[c] and redis.call('EXISTS', KEYS[2 * c - 1]) == 0 then
    redis.call('ZREM', KEYS[2 * c], ARGV[i])
  end
  i = i + 4 + 2 * tonumber(ARGV[i + 3])
end
return 1
