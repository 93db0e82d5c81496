-- Add counts to one counter's buckets at every precision, at most once per message.
-- KEYS: one HASH per precision, the counter's "registered" marker, then (when ARGV[1] > 0)
--       the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), then for each precision in KEYS order:
--       n, then n pairs of bucket_start, amount.
-- Returns {applied (1, or 0 when this message was already applied), registered (1 when the
-- counter is known to be in the registry; 0 tells the caller to add it there)}.
local ttl = tonumber(ARGV[1])
local nprec = #KEYS - 1
if ttl > 0 then
  nprec = nprec - 1
  if not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'EX', ttl) then
    return {0, redis.call('EXISTS', KEYS[nprec + 1])}
  end
end
local i = 2
for j = 1, nprec do
  local n = tonumber(ARGV[i])
  i = i + 1
  for _ = 1, n do
    if redis.call('HINCRBY', KEYS[j], ARGV[i], ARGV[i + 1]) == 0 then
      -- a correction brought the bucket back to zero: keep only non-zero buckets
      redis.call('HDEL', KEYS[j], ARGV[i])
    end
    i = i + 2
  end
end
return {1, redis.call('EXISTS', KEYS[nprec + 1])}
