-- Add to the workers' cumulative totals (what the metrics export), in one call.
-- KEYS: the throughput HASH (one key, tag {throughput}).
-- ARGV: the newest item time applied (epoch seconds; '' when none), then field, increment
--       pairs (integers).
-- The field 'newest_ts' keeps the largest item time ever given (a max, never lowered, so
-- workers applying old and new items in any order leave the newest).
-- Returns 1.
-- The HASH's type and the fields it adds to are checked before the first write (a field that
-- holds no integer, changed by hand, fails the call naming it, nothing added).
local refused = wrong_type({KEYS[1], 'hash'})
if refused then
  return refused
end
for i = 2, #ARGV, 2 do
  local kept = redis.call('HGET', KEYS[1], ARGV[i])
  if kept and not string.match(kept, '^%-?%d+$') then
    return redis.error_reply('ERR ' .. KEYS[1] .. ' field ' .. ARGV[i] .. ' holds ' .. string.sub(kept, 1, 40) ..
                             ', not an integer (changed by hand?): nothing was written')
  end
end
local newest = tonumber(ARGV[1])
if newest then
  local kept = tonumber(redis.call('HGET', KEYS[1], 'newest_ts'))
  if not kept or newest > kept then
    redis.call('HSET', KEYS[1], 'newest_ts', ARGV[1])
  end
end
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
