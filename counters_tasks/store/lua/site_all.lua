-- Count page views and unique visitors of the site, all time, in one shard (by visitor id).
-- KEYS: the shard's totals HASH (pv, uv), visitors SET (HLL in hll mode), then (when
--       ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), n, then n visitor ids
--       (one per view; an id may repeat).
-- Every key's type is checked before the first write (wrong_type).
-- Returns 0, or -1 when this message was already applied here.
local ttl = tonumber(ARGV[1])
local refused = wrong_type({KEYS[1], 'hash', KEYS[2], ARGV[2] == 'hll' and 'string' or 'set',
                            KEYS[3] or KEYS[1], KEYS[3] and 'string' or 'hash'})
if refused then
  return refused
end
if ttl > 0 then
  if not redis.call('SET', KEYS[3], '1', 'NX', 'EX', ttl) then
    return -1
  end
end
local n = tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[1], 'pv', n)
if ARGV[2] == 'hll' then
  for from = 4, 3 + n, 1000 do
    redis.call('PFADD', KEYS[2], unpack(ARGV, from, math.min(from + 999, 3 + n)))
  end
  redis.call('HSET', KEYS[1], 'uv', redis.call('PFCOUNT', KEYS[2]))
else
  local new = 0
  for from = 4, 3 + n, 1000 do  -- SADD counts each new member once, repeated or not
    new = new + redis.call('SADD', KEYS[2], unpack(ARGV, from, math.min(from + 999, 3 + n)))
  end
  if new > 0 then
    redis.call('HINCRBY', KEYS[1], 'uv', new)
  end
end
return 0
