-- Add counts to the buckets of counters of one tag group, every precision, at most once per
-- message, and keep the group's due index.
-- KEYS: per counter, its HASH then its due ZSET (one of the group's DUE_SUBSETS); then the
--       group's due summary ZSET; then (when ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), the number of counters, then per counter (KEYS
--       order): its member in the due index, its subset number, the earliest time one of these
--       buckets leaves the window, n, then n pairs of field (bucket_start / precision * 10 +
--       precision index), amount.
-- A bucket brought back to zero by a correction is removed (only non-zero buckets are kept); a
-- counter left with no bucket leaves the due index, any other gets the earlier of its score
-- and these buckets' (ZADD LT), and so does its subset in the summary, so the cleaner finds it
-- when its first sample is due. (Subsets keep each due ZSET small enough to stay a listpack.)
-- The summary and the marker are type-checked before the first write (wrong_type); a counter's
-- HASH by its first HINCRBY and its due ZSET by its ZADD (or a ZSCORE before a removal): one of
-- another type, or a bucket that would pass the 64-bit range, fails the call whole, its
-- additions undone, before the marker. A counter's due entry is written only when one of its
-- buckets is new (an existing bucket's leave time is never before its due score), and it
-- leaves the index only when a correction emptied its HASH.
-- Returns 1, or 0 when this message was already applied here (nothing written).
local ttl = tonumber(ARGV[1])
local ncounters = tonumber(ARGV[2])
local summary = KEYS[2 * ncounters + 1]
local refused = wrong_type({summary, 'zset'})
if refused then
  return refused
end
if ttl > 0 then  -- the marker's TYPE says both whether it is there and whether it is a marker
  local marker = KEYS[2 * ncounters + 2]
  local found = redis.call('TYPE', marker)['ok']
  if found == 'string' then
    return 0
  elseif found ~= 'none' then
    return wrong_type({marker, 'string'})
  end
end
-- Every bucket first: HINCRBY refuses a field that would leave the 64-bit range, or a key of
-- another type, so such a call undoes what it added (exact: integers) and fails whole, before
-- its marker and due entries. (Reading every field first to check would cost an HMGET as big as
-- the call; a TYPE per counter, a command per counter.)
local added = {}  -- flat: per addition, its counter's number and the ARGV index of its field

local function undo_all(reply)  -- take back every addition, and fail with reply
  for u = #added - 1, 1, -2 do
    local key, field = KEYS[2 * added[u] - 1], ARGV[added[u + 1]]
    if redis.call('HINCRBY', key, field, string.format('%.0f', -tonumber(ARGV[added[u + 1] + 1]))) == 0 then
      redis.call('HDEL', key, field)
    end
  end
  return reply
end

local fresh, emptied = {}, {}  -- per counter: a bucket of it is new; a correction emptied one
local i = 3
for c = 1, ncounters do
  local key = KEYS[2 * c - 1]
  local n = tonumber(ARGV[i + 3])
  i = i + 4
  for _ = 1, n do
    local total = redis.pcall('HINCRBY', key, ARGV[i], ARGV[i + 1])
    if type(total) == 'table' and total['err'] then
      return undo_all(wrong_type({key, 'hash'}) or
        redis.error_reply('ERR ' .. key .. ' field ' .. ARGV[i] .. ': ' .. total['err'] .. ': nothing was written'))
    end
    if total == 0 then
      redis.call('HDEL', key, ARGV[i])
      emptied[c] = true
    elseif total == tonumber(ARGV[i + 1]) then  -- kept buckets are never 0: this one is new
      fresh[c] = true
    end
    added[#added + 1] = c
    added[#added + 1] = i
    i = i + 2
  end
end
-- Then the due entries, each due ZSET checked by its own command: one of another type fails the
-- call with every bucket taken back (a due score written before it is only early: the cleaner
-- visits that counter once for nothing). Removals go last, once every key is known good.
local gone = {}
i = 3
for c = 1, ncounters do
  local key, due = KEYS[2 * c - 1], KEYS[2 * c]
  local member, subset, first_due, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  i = i + 4 + 2 * n
  if emptied[c] and redis.call('EXISTS', key) == 0 then
    local _, refused_due = wrong_type_read('zset', 'ZSCORE', due, member)
    if refused_due then
      return undo_all(refused_due)
    end
    gone[#gone + 1] = {due, member}
  elseif fresh[c] or emptied[c] then
    local changed = redis.pcall('ZADD', due, 'LT', 'CH', first_due, member)
    if type(changed) == 'table' and changed['err'] then
      return undo_all(wrong_type({due, 'zset'}) or redis.error_reply(changed['err']))
    end
    if changed == 1 then  -- new, or due earlier
      redis.call('ZADD', summary, 'LT', first_due, subset)
    end
  end
end
for _, entry in ipairs(gone) do
  redis.call('ZREM', entry[1], entry[2])
end
if ttl > 0 then
  redis.call('SET', KEYS[2 * ncounters + 2], '1', 'EX', ttl)
end
return 1
