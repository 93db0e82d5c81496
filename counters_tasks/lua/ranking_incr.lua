-- Add an amount to one member of one board in one time slot, at most once per message.
-- KEYS: the board's meta HASH, top ZSET, slot index ZSET, the slot's HASH, then (when
--       ARGV[1] > 0) the message's dedupe marker. All share the board's hash tag.
-- ARGV: marker TTL (0 = no dedupe), period_hours, interval_hours, slot, member, amount,
--       slot hash TTL in seconds, -amount (as text: a Lua number would lose digits past 14).
-- Invariant kept by every ranking script: top[m] = -(sum of m over the slot hashes in the index),
-- zero totals absent; an index entry exists exactly when its slot hash does.
-- Returns {status, 1 when the board is not yet confirmed in the registry (meta.reg unset) else 0};
-- status 1 applied, 0 already applied (same message), 2 late (slot left the window: ignored and
-- counted in meta.late), -1 the board exists with other settings (nothing written).
local ttl = tonumber(ARGV[1])
local meta = redis.call('HMGET', KEYS[1], 'period', 'interval', 'wm', 'rot', 'reg')
local unregistered = meta[5] and 0 or 1
if meta[1] and (meta[1] ~= ARGV[2] or meta[2] ~= ARGV[3]) then
  return {-1, 0}
end
if ttl > 0 then
  if not redis.call('SET', KEYS[5], '1', 'NX', 'EX', ttl) then
    return {0, unregistered}
  end
end
if not meta[1] then
  redis.call('HSET', KEYS[1], 'period', ARGV[2], 'interval', ARGV[3])
end
local n = tonumber(ARGV[2]) / tonumber(ARGV[3])
local slot = tonumber(ARGV[4])
local wm = tonumber(meta[3])
local rot = tonumber(meta[4])
if (wm and slot <= wm - n) or (rot and slot < rot) then
  redis.call('HINCRBY', KEYS[1], 'late', 1)
  return {2, unregistered}
end
if not wm or slot > wm then
  redis.call('HSET', KEYS[1], 'wm', ARGV[4])
end
local member, amount = ARGV[5], ARGV[6]
if redis.call('HINCRBY', KEYS[4], member, amount) == 0 then
  redis.call('HDEL', KEYS[4], member)
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[4])
  redis.call('EXPIRE', KEYS[4], ARGV[7])
else
  redis.call('ZREM', KEYS[3], ARGV[4])
end
if tonumber(redis.call('ZINCRBY', KEYS[2], ARGV[8], member)) == 0 then
  redis.call('ZREM', KEYS[2], member)
end
return {1, unregistered}
