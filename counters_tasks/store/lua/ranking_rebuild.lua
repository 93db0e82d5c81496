-- Recompute one board's top ZSET from its live slot hashes (recovery).
-- KEYS: the board's meta HASH, top ZSET, slot index ZSET.
-- ARGV: slot hash name head, tail.
-- Index entries whose hash is gone (expired by the safety-net TTL) are dropped: their data had
-- left the window long before (the TTL outlives the window by days), so losing it changes no
-- answer for a `now` at or after the latest rotation. Returns the number of members listed.
local function negate(value)  -- as text: a Lua number would lose digits past 14
  if value:sub(1, 1) == '-' then
    return value:sub(2)
  end
  return '-' .. value
end
redis.call('DEL', KEYS[2])
for _, s in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local kv = redis.call('HGETALL', ARGV[1] .. s .. ARGV[2])
  if #kv == 0 then
    redis.call('ZREM', KEYS[3], s)
  end
  for i = 1, #kv, 2 do
    redis.call('ZINCRBY', KEYS[2], negate(kv[i + 1]), kv[i])
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], 0, 0)
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'rebuilds', 1)
end
return redis.call('ZCARD', KEYS[2])
