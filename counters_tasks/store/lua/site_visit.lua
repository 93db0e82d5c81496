-- Count page views and unique visitors in one slot, at most once per message.
-- KEYS: k groups (totals HASH with fields pv and uv, visitors SET or HLL, then r extra keys:
--       the day's range HLL when r >= 1, the day's pages ZSET when r = 2), then (when
--       ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), k, then per group:
--       visitors expire-at (epoch s, 0 = never), totals expire-at (0 = never), n, then n
--       visitor ids (one per view; an id may repeat), then r, then when r = 2: m, then m
--       (path, views) pairs for the pages ZSET. Extra keys expire with the totals.
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
local k = 1
for j = 1, npairs do
  local totals, visitors = KEYS[k], KEYS[k + 1]
  local visitors_at, totals_at, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local first, last = i + 3, i + 2 + n
  local r = tonumber(ARGV[last + 1])
  local range_hll, pages = KEYS[k + 2], KEYS[k + 3]
  k = k + 2 + r
  i = last + 2
  local pages_first, pages_last = i + 1, i
  if r == 2 then
    pages_last = i + 2 * tonumber(ARGV[i])
    i = pages_last + 1
  end
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
    if r >= 1 then
      for from = first, last, 1000 do
        redis.call('PFADD', range_hll, unpack(ARGV, from, math.min(from + 999, last)))
      end
      if totals_at > 0 then
        redis.call('EXPIREAT', range_hll, totals_at)
      end
    end
    if r == 2 then
      for a = pages_first, pages_last, 2 do
        redis.call('ZINCRBY', pages, ARGV[a + 1], ARGV[a])
      end
      if totals_at > 0 then
        redis.call('EXPIREAT', pages, totals_at)
      end
    end
  end
end
return skipped
