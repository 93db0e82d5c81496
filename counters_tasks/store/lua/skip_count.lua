-- Add one message's skipped requests (skips.py) to the all-time counts and to each (site, day)
-- it names, at most once per message.
-- KEYS: the message's marker, the all-time counts HASH, then one counts HASH a (site, day);
--       one hash tag ({skipped}).
-- ARGV: marker TTL in seconds (0 = no dedupe: the marker is not touched), the day hashes' TTL
--       in seconds, then triples: the index in KEYS of the day hash (0: none), field, count.
-- Returns 1 when counted, 0 when this message's skips were counted before (a redelivery).
local ttl = tonumber(ARGV[1])
local day_ttl = tonumber(ARGV[2])
local types = {KEYS[1], 'string'}
for n = 2, #KEYS do
  types[#types + 1] = KEYS[n]
  types[#types + 1] = 'hash'
end
local refused = wrong_type(types)
if refused then
  return refused
end
if ttl > 0 then
  if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ttl) then
    return 0
  end
end
for i = 3, #ARGV, 3 do
  redis.call('HINCRBY', KEYS[2], ARGV[i + 1], ARGV[i + 2])
  local day = tonumber(ARGV[i])
  if day > 0 then
    redis.call('HINCRBY', KEYS[day], ARGV[i + 1], ARGV[i + 2])
  end
end
for n = 3, #KEYS do
  redis.call('EXPIRE', KEYS[n], day_ttl)
end
return 1
