-- Add counts to the buckets of counters of one tag group, every precision, at most once per
-- message, and keep the group's due index.
-- KEYS: per counter, its HASH; then the group's due ZSET; then (when ARGV[1] > 0) the
--       message's dedupe marker of this group.
-- ARGV: marker TTL in seconds (0 = no dedupe), the number of counters, then per counter (KEYS
--       order): its member in the due index, the earliest time one of these buckets leaves the
--       window, n, then n pairs of field (bucket_start / precision * 10 + precision index), amount.
-- A bucket brought back to zero by a correction is removed (only non-zero buckets are kept); a
-- counter left with no bucket leaves the due index, any other gets the earlier of its score
-- and these buckets' (ZADD LT), so the cleaner visits it when its first sample is due.
-- Returns 1, or 0 when this message was already applied here (nothing written).
local ttl = tonumber(ARGV[1])
local ncounters = tonumber(ARGV[2])
local due = KEYS[ncounters + 1]
if ttl > 0 and not redis.call('SET', KEYS[ncounters + 2], '1', 'NX', 'EX', ttl) then
  return 0
end
local i = 3
for c = 1, ncounters do
  local key, member, first_due, n = KEYS[c], ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  i = i + 3
  for _ = 1, n do
    if redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1]) == 0 then
      redis.call('HDEL', key, ARGV[i])
    end
    i = i + 2
  end
  if redis.call('EXISTS', key) == 1 then
    redis.call('ZADD', due, 'LT', first_due, member)
  else
    redis.call('ZREM', due, member)
  end
end
return 1
