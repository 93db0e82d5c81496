-- Drop one counter's samples that left the retention window.
-- KEYS: the counter's HASH for every precision, then its "registered" marker.
-- ARGV: for each HASH, the cutoff (drop buckets <= cutoff) or '-' when not due this pass.
-- Returns {samples removed, how many of the hashes still exist}. When none is left the
-- marker goes too, so the next write registers the counter again.
local removed = 0
local nprec = #KEYS - 1
for j = 1, nprec do
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
local left = redis.call('EXISTS', unpack(KEYS, 1, nprec))
if left == 0 then
  redis.call('DEL', KEYS[nprec + 1])
end
return {removed, left}
