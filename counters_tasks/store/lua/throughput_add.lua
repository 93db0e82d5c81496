-- Add to the workers' cumulative totals (what the metrics export), in one call.
-- KEYS: the throughput HASH (one key, tag {throughput}).
-- ARGV: the newest event time applied (epoch seconds; '' when none), then field, increment
--       pairs (integers).
-- The field 'newest_ts' keeps the largest event time ever given (a max, never lowered, so
-- workers applying old and new events in any order leave the newest).
-- Returns 1.
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
