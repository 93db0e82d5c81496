-- Set a message aside: keep its record in the dead-letter list (newest first, capped), count
-- its reason, and forget it as unacknowledged so the broker never restores it.
-- KEYS: the dead-letter LIST, the reasons HASH, kombu's unacked HASH, its unacked index ZSET.
-- ARGV: the record (JSON text), the most records kept, the reason, the message's delivery tag
--       ('' when it has none or was never recorded as unacknowledged).
-- Returns the number of records kept.
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
if ARGV[4] ~= '' then
  redis.call('HDEL', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
end
return redis.call('LLEN', KEYS[1])
