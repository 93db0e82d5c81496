-- Forget one visitor from a HASH that keeps one field per visitor beside its exact count (a
-- path's all-time HASH, page_all: `pv`, `uv` and an empty field per visitor id), in one call.
-- KEYS: the HASH.
-- ARGV: the count's field (`uv`), then the visitor's fields.
-- The count goes down by the fields HDEL removed (nothing is written when none was there).
-- Returns the fields removed.
local refused = wrong_type({KEYS[1], 'hash'})
if refused then
  return refused
end
local removed = 0
for from = 2, #ARGV, 1000 do
  removed = removed + redis.call('HDEL', KEYS[1], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
if removed > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -removed)
end
return removed
