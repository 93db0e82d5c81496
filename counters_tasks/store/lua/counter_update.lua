-- Add counts to the buckets of counters of one tag group, at every precision, at most once per
-- message.
-- KEYS: per counter, its HASH at each precision then its "registered" marker; then (when
--       ARGV[1] > 0) the message's dedupe marker of this group.
-- ARGV: marker TTL in seconds (0 = no dedupe), the number of counters, the number of
--       precisions, then per counter and precision (KEYS order): n, then n pairs of
--       bucket_start, amount.
-- Returns {applied (1, or 0 when this message was already applied here), then per counter 1
-- when it is known to be in the registry, 0 when the caller must add it there}.
local ttl = tonumber(ARGV[1])
local ncounters, nprec = tonumber(ARGV[2]), tonumber(ARGV[3])
local per = nprec + 1
local out = {1}
if ttl > 0 and not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'EX', ttl) then
  out[1] = 0
  for c = 1, ncounters do
    out[c + 1] = redis.call('EXISTS', KEYS[c * per])
  end
  return out
end
local i = 4
for c = 1, ncounters do
  local base = (c - 1) * per
  for j = 1, nprec do
    local n = tonumber(ARGV[i])
    i = i + 1
    for _ = 1, n do
      if redis.call('HINCRBY', KEYS[base + j], ARGV[i], ARGV[i + 1]) == 0 then
        -- a correction brought the bucket back to zero: keep only non-zero buckets
        redis.call('HDEL', KEYS[base + j], ARGV[i])
      end
      i = i + 2
    end
  end
  out[c + 1] = redis.call('EXISTS', KEYS[c * per])
end
return out
