-- Set a message aside: keep it (its dead letter) in the dead-letter list (newest first, capped), count
-- its reason, and forget it as unacknowledged so the broker never restores it.
-- KEYS: the dead-letter LIST, the reasons HASH, kombu's unacked HASH, its unacked index ZSET.
-- ARGV: the dead letter (JSON text), the most dead letters kept, the reason, the message's delivery tag
--       ('' when it has none or was never marked unacknowledged).
-- Returns the number of dead letters kept.
-- Every key's type is checked before the first write (wrong_type): a failed call keeps no
-- dead letter, so the message stays where it was and a retry does not set it aside twice.
local refused = wrong_type({KEYS[1], 'list', KEYS[2], 'hash', KEYS[3] ~= '' and KEYS[3] or KEYS[1],
                            KEYS[3] ~= '' and 'hash' or 'list', KEYS[4] ~= '' and KEYS[4] or KEYS[1],
                            KEYS[4] ~= '' and 'zset' or 'list'})
if refused then
  return refused
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
if ARGV[4] ~= '' then
  redis.call('HDEL', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
end
return redis.call('LLEN', KEYS[1])
