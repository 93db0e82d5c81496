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
-- Every key's type is checked before the first write (wrong_type); a bucket that would pass the
-- 64-bit range fails the call whole (its additions undone), before the marker.
-- Returns 1, or 0 when this message was already applied here (nothing written).
local ttl = tonumber(ARGV[1])
local ncounters = tonumber(ARGV[2])
local summary = KEYS[2 * ncounters + 1]
local types = {summary, 'zset', KEYS[2 * ncounters + 2] or summary, KEYS[2 * ncounters + 2] and 'string' or 'zset'}
for c = 1, ncounters do
  types[#types + 1] = KEYS[2 * c - 1]
  types[#types + 1] = 'hash'
  types[#types + 1] = KEYS[2 * c]
  types[#types + 1] = 'zset'
end
local refused = wrong_type(types)
if refused then
  return refused
end
if ttl > 0 and redis.call('EXISTS', KEYS[2 * ncounters + 2]) == 1 then
  return 0
end
-- Every bucket first: HINCRBY refuses a field that would leave the 64-bit range, so such a call
-- undoes what it added (exact: integers) and fails whole, before its marker and due entries.
-- (Reading every field first to check would cost an HMGET as big as the call.)
local added = {}
local i = 3
for c = 1, ncounters do
  local key = KEYS[2 * c - 1]
  local n = tonumber(ARGV[i + 3])
  i = i + 4
  for _ = 1, n do
    local total = redis.pcall('HINCRBY', key, ARGV[i], ARGV[i + 1])
    if type(total) == 'table' and total['err'] then
      for u = #added, 1, -1 do
        local undo = added[u]
        if redis.call('HINCRBY', undo[1], undo[2], string.format('%.0f', -tonumber(undo[3]))) == 0 then
          redis.call('HDEL', undo[1], undo[2])
        end
      end
      return redis.error_reply('ERR ' .. key .. ' field ' .. ARGV[i] .. ': ' .. total['err'] .. ': nothing was written')
    end
    if total == 0 then
      redis.call('HDEL', key, ARGV[i])
    end
    added[#added + 1] = {key, ARGV[i], ARGV[i + 1]}
    i = i + 2
  end
end
if ttl > 0 then
  redis.call('SET', KEYS[2 * ncounters + 2], '1', 'EX', ttl)
end
i = 3
for c = 1, ncounters do
  local key, due = KEYS[2 * c - 1], KEYS[2 * c]
  local member, subset, first_due, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  i = i + 4 + 2 * n
  if redis.call('EXISTS', key) == 1 then
    if redis.call('ZADD', due, 'LT', 'CH', first_due, member) == 1 then  -- new, or due earlier
      redis.call('ZADD', summary, 'LT', first_due, subset)
    end
  else
    redis.call('ZREM', due, member)
  end
end
return 1
