-- Count the items of one message refused, by reason, at most once per message (refusals.py; the
-- skipped requests have skip_count.lua, which counts them by day too).
-- KEYS: the counts HASH, then (when ARGV[1] > 0) the message's marker; one hash tag.
-- ARGV: marker TTL in seconds (0 = no dedupe), then reason, count pairs.
-- Returns 1 when counted, 0 when this message's items were counted before (a redelivery).
local ttl = tonumber(ARGV[1])
local refused = wrong_type({KEYS[1], 'hash', KEYS[2] or KEYS[1], KEYS[2] and 'string' or 'hash'})
if refused then
  return refused
end
if ttl > 0 then
  if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ttl) then
    return 0
  end
end
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
