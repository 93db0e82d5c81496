-- Count page views and unique visitors in one slot, at most once per message.
-- KEYS: k pairs (totals HASH with fields pv and uv, visitors SET or HLL), then (when
--       ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), k, then per pair:
--       visitors expire-at (epoch s, 0 = never), totals expire-at (0 = never), n, then n
--       visitor ids (one per view; an id may repeat).
-- A pair whose visitors expire-at has passed (by the server's clock) is a closed day: it is
-- left alone, so a late view can never be counted as a new visitor of a forgotten day.
-- Returns the number of closed pairs skipped, or -1 when this message was already applied here.
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  if not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'EX', ttl) then
    return -1
  end
end
local hll = ARGV[2] == 'hll'
local npairs = tonumber(ARGV[3])
local now = tonumber(redis.call('TIME')[1])
local skipped = 0
local i = 4
for j = 1, npairs do
  local totals, visitors = KEYS[2 * j - 1], KEYS[2 * j]
  local visitors_at, totals_at, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local first, last = i + 3, i + 2 + n
  i = last + 1
  if visitors_at > 0 and visitors_at <= now then
    skipped = skipped + 1
  elseif n > 0 then
    redis.call('HINCRBY', totals, 'pv', n)
    if hll then
      for from = first, last, 1000 do
        redis.call('PFADD', visitors, unpack(ARGV, from, math.min(from + 999, last)))
      end
      redis.call('HSET', totals, 'uv', redis.call('PFCOUNT', visitors))
    else
      local new = 0
      for a = first, last do
        new = new + redis.call('SADD', visitors, ARGV[a])
      end
      if new > 0 then
        redis.call('HINCRBY', totals, 'uv', new)
      end
    end
    if visitors_at > 0 then
      redis.call('EXPIREAT', visitors, visitors_at)
    end
    if totals_at > 0 then
      redis.call('EXPIREAT', totals, totals_at)
    end
  end
end
return skipped
