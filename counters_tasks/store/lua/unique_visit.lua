-- Mark session ids as seen on one day: SADD to the day's shards, INCR the day's count by the
-- number of new ids, at most once per message.
-- KEYS: the day's expected figure, the day's count, the day's open marker, the day's overflow
--       HASH, m shard SETs, then (when ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL (0 = no dedupe), the expected figure the caller sharded by, shards
--       expire-at (epoch s, from the day), shards kept (s, from now), count expire-at (from the
--       day), count kept (s, from now), m, then per shard: its number, n, then n integer ids.
-- A shard never holds more than 512 ids (so it stays an intset): when it is full, its ids
-- continue in overflow sets named `<shard key>:<k>` (k = 1, 2, ...; same hash tag), their
-- number kept in the overflow HASH (shard number -> k).
-- A day is open while its open marker lives. The first write of a day that was never counted
-- (no count), however old, opens it: history can be back-filled. It fixes the moment the
-- day's shards go, the later of their day-based expiry and "kept" seconds from now (retention
-- runs from when data is written), and stores it in the marker, which expires then too, so
-- every shard of the day, whenever written, goes at that same moment. A day with a count but
-- no open marker had its shards expire: it is closed, since its ids can no longer be
-- deduplicated (nothing is written). The count and figure are kept until the later of their
-- day-based expiry and "kept" seconds from the latest write.
-- Returns the number of new ids; -1 when the day's figure is missing or not the caller's (the
-- caller fixes or re-reads it and sends again; nothing was written); -2 when the day is closed
-- (nothing written); 0 when already applied.
local SHARD_MAX = 512
local fixed = redis.call('GET', KEYS[1])
if fixed ~= ARGV[2] then
  return -1
end
local now = tonumber(redis.call('TIME')[1])
local shards_at = tonumber(redis.call('GET', KEYS[3]))
if not shards_at then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return -2
  end
  shards_at = math.max(tonumber(ARGV[3]), now + tonumber(ARGV[4]))
end
local count_at = math.max(tonumber(ARGV[5]), now + tonumber(ARGV[6]))
local ttl = tonumber(ARGV[1])
local nshards = tonumber(ARGV[7])
if ttl > 0 then
  if not redis.call('SET', KEYS[5 + nshards], '1', 'NX', 'EX', ttl) then
    return 0
  end
end
local new = 0
local i = 8
for j = 1, nshards do
  local base, shard, n = KEYS[4 + j], ARGV[i], tonumber(ARGV[i + 1])
  local extra = tonumber(redis.call('HGET', KEYS[4], shard) or '0')
  local chain = {base}
  for k = 1, extra do
    chain[#chain + 1] = base .. ':' .. k
  end
  local last = chain[#chain]
  local room = SHARD_MAX - redis.call('SCARD', last)
  local added = {}
  for a = i + 2, i + 1 + n do
    local id = ARGV[a]
    local seen = false
    for _, key in ipairs(chain) do
      if redis.call('SISMEMBER', key, id) == 1 then
        seen = true
        break
      end
    end
    if not seen then
      if room <= 0 then
        extra = extra + 1
        last = base .. ':' .. extra
        chain[#chain + 1] = last
        redis.call('HSET', KEYS[4], shard, extra)
        room = SHARD_MAX
      end
      redis.call('SADD', last, id)
      added[last] = true
      room = room - 1
      new = new + 1
    end
  end
  i = i + 2 + n
  for key in pairs(added) do
    redis.call('EXPIREAT', key, shards_at)
  end
end
redis.call('SET', KEYS[3], shards_at, 'EXAT', shards_at)
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('EXPIREAT', KEYS[4], shards_at)
end
if new > 0 then
  redis.call('INCRBY', KEYS[2], new)
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('EXPIREAT', KEYS[2], count_at)
end
if redis.call('TTL', KEYS[1]) >= 0 then
  redis.call('EXPIREAT', KEYS[1], count_at)
end
return new
