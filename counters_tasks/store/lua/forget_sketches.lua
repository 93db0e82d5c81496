-- Forget one visitor from a day table of sketches (store/page_sketch.py, lua/lib/page_sketch.lua)
-- and the exact figures kept beside them, one call a batch of fields (worker.forget): the pages
-- (page_day, with the pairs SET that keeps each path's UV exact), the sources, the who-visits
-- sketches (sitestats/erase.py), the events' and the goals' day tables (events/erase.py).
-- KEYS: the table's HASH, then (optional) the day's pairs SET; one hash tag (the day's).
-- ARGV: the visitor's 6-character sketch id, then per field four: the field; its value's form
--       "<lead>:<uv>": the value is <lead> numbers, then the sketch ("2:2": "<pv> <uv> <sketch>",
--       its 2nd number the UV; "0:0": the sketch alone, no UV in the value); its pairs member
--       ('' when its UV is not kept by a pairs SET); the field of the same HASH holding its exact
--       UV when not in the value ('' when none: a goal's `u:<goal>` beside its `s:<goal>`).
-- Per field: with a pairs member, SREM of it: the UV minus one when it was there, or when the pairs
-- SET is gone (the day closed) and the list sketch held the id; the id is then taken out of a list
-- sketch (one occurrence: a list holds each visitor new to the value once), never when the pairs
-- SET lives and did not hold the member (another visitor sharing its 36 bits). Without one, the id
-- is taken out of a list sketch and its UV (the list's count) goes down with it. A '#' sketch (a
-- HyperLogLog) or a layout-1 '!' sketch cannot forget a visitor: the field is returned as an
-- estimate. Each field: one HGET, at most one SREM, one HSET and one HINCRBY.
-- Returns {ids and members removed, UV figures corrected, the fields whose sketch is an estimate}.
local key, pairs = KEYS[1], KEYS[2]
local id = ARGV[1]
local checks = {key, 'hash'}
if pairs then
  checks[#checks + 1] = pairs
  checks[#checks + 1] = 'set'
end
local refused = wrong_type(checks)
if refused then
  return refused
end
local pairs_live = pairs and redis.call('EXISTS', pairs) == 1

local function drop(sketch)
  -- the list sketch without one occurrence of id at a 6-character place, and whether it held one
  local from = 1
  while true do
    local at = string.find(sketch, id, from, true)  -- (a plain search, in C)
    if not at then
      return sketch, false
    end
    if (at - 1) % 6 == 0 then
      return string.sub(sketch, 1, at - 1) .. string.sub(sketch, at + 6), true
    end
    from = at + 1
  end
end

local removed, corrected, estimates = 0, 0, {}
for a = 2, #ARGV, 4 do
  local field, form, member, count_field = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local lead, uv_at = string.match(form, '^(%d+):(%d+)$')
  lead, uv_at = tonumber(lead), tonumber(uv_at)
  local in_pairs = false
  if member ~= '' and pairs_live then
    in_pairs = redis.call('SREM', pairs, member) == 1
    if in_pairs then
      removed = removed + 1
    end
  end
  local value = redis.call('HGET', key, field)
  local dropped = false
  if value then
    local numbers, rest = {}, value
    for n = 1, lead do
      local number, after = string.match(rest, '^(%-?%d+) ?(.*)$')
      numbers[n], rest = number, after
    end
    local sketch = rest
    local first = string.sub(sketch, 1, 1)
    local hll = first == '#' or first == '!'
    if not hll and (member == '' or in_pairs or not pairs_live) then
      sketch, dropped = drop(sketch)
      if dropped then
        removed = removed + 1
      end
    end
    if hll then
      estimates[#estimates + 1] = field
    end
    local lower = in_pairs or dropped
    if lower and uv_at > 0 and tonumber(numbers[uv_at]) > 0 then
      numbers[uv_at] = tostring(tonumber(numbers[uv_at]) - 1)
      corrected = corrected + 1
    end
    if dropped or (lower and uv_at > 0) then
      local text = table.concat(numbers, ' ')
      if sketch ~= '' then
        text = lead > 0 and (text .. ' ' .. sketch) or sketch
      end
      redis.call('HSET', key, field, text)
    end
  end
  if (in_pairs or dropped) and count_field ~= '' and tonumber(redis.call('HGET', key, count_field) or '0') > 0 then
    redis.call('HINCRBY', key, count_field, -1)
    corrected = corrected + 1
  end
end
return {removed, corrected, estimates}
