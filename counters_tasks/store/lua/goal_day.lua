-- Count the conversions of a site's goals on one local day (issue 43; events/goal_day.py makes
-- the calls): per goal its conversions, its unique converters of the day (exact through a pairs
-- SET of "<visitor><goal digest>" members, as sitestats' pairs) with their sketch (page_sketch.lua:
-- the range's converters are the union of the days' sketches), and its revenue.
-- KEYS: the day's goals HASH (open_until, and per goal, by its id "<name>@<since>" (goal_id in
--       events/goal_day.py: a goal defined again counts apart), "c:<id>" conversions, "u:<id>"
--       converters, "s:<id>" their sketch, "r:<id>" revenue, "x:<id>" conversions without a
--       revenue number), the day's converters pairs SET, the part's dedupe marker (a HASH of the
--       goal ids applied: goals of one part of a message may go in several calls, each goal once).
--       All in the tag of the site and day.
-- ARGV: marker TTL in seconds (0 = no dedupe), the day's open-until from the day (epoch s), kept
--       from the day's first write (s), the HASH's expire-at from the day (epoch s), kept from now
--       (s), g, then per goal six: its id, the id's digest (8 characters: its pairs members' tail and
--       its sketch's HLL key, "<HASH key>:<digest>", store/page_sketch.py's hll_key), its
--       conversions, its revenue summed ('' when it has no revenue property), its conversions
--       without a revenue number, and its converters in one string (each visitor's pairs form, 11
--       characters, in order, repeats allowed; conversions without a visitor are in none).
-- A day is open until open_until, fixed by its first write (the later of the day-based one and
-- "kept" from that write); the pairs SET expires then. A conversion of a closed day counts with
-- its revenue, not in converters (its visitor can no longer be deduplicated).
-- Every key's type is checked before the first write (wrong_type).
-- Returns {conversions written now, conversions skipped as written before (their goal's marker
-- field was set), conversions of a visitor on a closed day (counted without converters)}.
local day, pairs, marker = KEYS[1], KEYS[2], KEYS[3]
local ttl = tonumber(ARGV[1])
local refused = wrong_type({day, 'hash', pairs, 'set', marker, 'hash'})
if refused then
  return refused
end
local now, open_until, open = day_open(day, ARGV[2], ARGV[3], false)
local written, skipped, closed = 0, 0, 0
local goals = tonumber(ARGV[6])
local fields, values = {}, {}
for g = 0, goals - 1 do
  local at = 7 + g * 6
  local name, digest, conversions = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2])  -- (name: the goal's id)
  local revenue, no_revenue, visitors = ARGV[at + 3], tonumber(ARGV[at + 4]), ARGV[at + 5]
  if ttl > 0 and redis.call('HSETNX', marker, name, 1) == 0 then
    skipped = skipped + conversions
  else
    written = written + conversions
    redis.call('HINCRBY', day, 'c:' .. name, conversions)
    if revenue ~= '' then
      redis.call('HINCRBYFLOAT', day, 'r:' .. name, revenue)
    end
    if no_revenue > 0 then
      redis.call('HINCRBY', day, 'x:' .. name, no_revenue)
    end
    if not open then
      closed = closed + #visitors / 11
    elseif #visitors > 0 then
      local new_ids = {}
      for v = 1, #visitors - 10, 11 do
        local visitor = string.sub(visitors, v, v + 10)
        if redis.call('SADD', pairs, visitor .. digest) == 1 then
          new_ids[#new_ids + 1] = string.sub(visitor, 1, 6)
        end
      end
      if #new_ids > 0 then
        local held = redis.call('HMGET', day, 'u:' .. name, 's:' .. name)
        fields[#fields + 1] = 'u:' .. name
        values[#values + 1] = (tonumber(held[1]) or 0) + #new_ids
        fields[#fields + 1] = 's:' .. name
        values[#values + 1] = page_sketch_add_all(held[2] or '', new_ids, day .. ':' .. digest)
      end
    end
  end
end
for f = 1, #fields do
  redis.call('HSET', day, fields[f], values[f])
end
if open then
  redis.call('EXPIREAT', pairs, open_until)
end
local keep_at = math.max(tonumber(ARGV[4]), now + tonumber(ARGV[5]))
redis.call('EXPIREAT', day, keep_at)
page_sketch_keep(keep_at)
if ttl > 0 then
  redis.call('EXPIRE', marker, ttl)
end
return {written, skipped, closed}
