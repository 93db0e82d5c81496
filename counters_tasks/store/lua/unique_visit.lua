-- Mark session ids as seen on one day: SADD to the day's shards, INCR the day's count by the
-- number of new ids, at most once per message.
-- KEYS: the day's expected figure, the day's count, m shard SETs, then (when ARGV[1] > 0) the
--       message's dedupe marker.
-- ARGV: marker TTL (0 = no dedupe), the expected figure the caller sharded by, shards
--       expire-at (epoch s), count expire-at, m, then per shard: n, then n integer ids.
-- Returns the number of new ids; -1 when the day's figure is missing or not the caller's (the
-- caller fixes or re-reads it and sends again; nothing was written); -2 when the shards' day
-- is closed (expire-at passed by the server's clock; nothing written); 0 when already applied.
local fixed = redis.call('GET', KEYS[1])
if fixed ~= ARGV[2] then
  return -1
end
local shards_at = tonumber(ARGV[3])
if shards_at <= tonumber(redis.call('TIME')[1]) then
  return -2
end
local ttl = tonumber(ARGV[1])
local nshards = tonumber(ARGV[5])
if ttl > 0 then
  if not redis.call('SET', KEYS[3 + nshards], '1', 'NX', 'EX', ttl) then
    return 0
  end
end
local new = 0
local i = 6
for j = 1, nshards do
  local n = tonumber(ARGV[i])
  for a = i + 1, i + n do
    new = new + redis.call('SADD', KEYS[2 + j], ARGV[a])
  end
  i = i + n + 1
  redis.call('EXPIREAT', KEYS[2 + j], shards_at)
end
if new > 0 then
  redis.call('INCRBY', KEYS[2], new)
  redis.call('EXPIREAT', KEYS[2], ARGV[4])
end
return new
