-- Forget one visitor from a SET of visitor (or session) ids and its exact figure, in one call
-- (worker.forget: site_day's visitors, site_all's shard, pairs members, a goal's or an event's
-- pairs, the daily uniques' set).
-- KEYS: the SET, then (optional) the key of its figure: a HASH (ARGV[1] names the field) or a
--       STRING (ARGV[1] = '').
-- ARGV: the figure's field ('' for a STRING figure), then the members to remove.
-- The figure goes down by the members SREM removed (those that were there), so it stays the
-- SET's exact count; nothing is written when none was there. A key of another type is refused
-- before the first write (wrong_type).
-- Returns the members removed.
local checks = {KEYS[1], 'set'}
if KEYS[2] then
  checks[#checks + 1] = KEYS[2]
  checks[#checks + 1] = ARGV[1] == '' and 'string' or 'hash'
end
local refused = wrong_type(checks)
if refused then
  return refused
end
local removed = 0
for from = 2, #ARGV, 1000 do
  removed = removed + redis.call('SREM', KEYS[1], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
if removed > 0 and KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  if ARGV[1] == '' then
    redis.call('DECRBY', KEYS[2], removed)
  else
    redis.call('HINCRBY', KEYS[2], ARGV[1], -removed)
  end
end
return removed
