-- Drop one counter's samples that left the retention window.
-- KEYS: the counter's HASH for every precision.
-- ARGV: for each key, the cutoff (drop buckets <= cutoff) or '-' when not due this pass.
-- Returns {samples removed, how many of the hashes still exist}.
local removed = 0
for j = 1, #KEYS do
  local cutoff = tonumber(ARGV[j])
  if cutoff then
    local old = {}
    for _, field in ipairs(redis.call('HKEYS', KEYS[j])) do
      if tonumber(field) <= cutoff then
        old[#old + 1] = field
      end
    end
    for first = 1, #old, 1000 do
      redis.call('HDEL', KEYS[j], unpack(old, first, math.min(first + 999, #old)))
    end
    removed = removed + #old
  end
end
return {removed, redis.call('EXISTS', unpack(KEYS))}
