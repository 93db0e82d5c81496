-- Count events of one local day of one site (events/event_day.py; docs/events.md "What an event
-- counts"): each event name's count, exact unique visitors, events without a visitor and
-- properties dropped; each property value's count and a sketch of its visitors; per property the
-- events without it ('(none)'); the names, keys and values past the day's caps as '(other)'.
-- KEYS: [1] the day's HASH (the fields below), [2] the day's pairs SET ("<visitor><name digest>":
--       an event's exact UV of the day), [3] the dedupe marker (of the call's id).
-- ARGV: [1] marker TTL in seconds (0 = no dedupe), [2] the pairs' expire-at (epoch s, from the
--       day), [3] the pairs kept (s, from the day's first write), [4] the table's expire-at (from
--       the day), [5] the table kept (s, from now), [6] the most names a day tracks, [7] the most
--       property keys a name tracks, [8] the most values a (name, key) tracks, [9] n, then per
--       event: its name, the name's digest (8 characters), its visitor's pairs form (11
--       characters; '' none), the properties dropped past MAX_PROPS, k, then k times: key, the
--       digest of "<name>\x1f<key>" (8 characters), value.
-- The HASH's fields (\x1f: a separator no name, key or value holds; a name, key or value past
-- its cap is '' in a field: '(other)'):
--   open_until                  the day's pairs live until then (fixed by the day's first write)
--   names                       names tracked
--   e\x1f<name>                 "<count> <uv> <no visitor> <dropped> <closed> <sketch>"
--   k\x1f<name>                 the name's tracked keys: "<key>\x1f<its digest>\x1f" each
--   c\x1f<name>\x1f<key>        values tracked
--   v\x1f<name>\x1f<key>\x1f<value>  "<count> <number> <sketch>" (<number>: the value's place among
--                               the key's tracked values, which names its HLL; 0 for '(other)')
--   n\x1f<name>\x1f<key>        "<count> <sketch>": the name's events without the key (from the
--                               day's first, whenever the key was first seen)
-- A sketch is page_sketch.lua's (a list of 6-character ids, or '#' and an HLL under KEYS[1], ':',
-- a letter and a digest: 'e' and a name's ('~' for the names' (other)), 'v' and its key's, '.'
-- and a value's number, 'o' and a key's (its (other)), 'z' and a key's (its (none))). A day is open until open_until (site_day.lua's rule): an event of a closed day
-- counts, in no UV ('closed').
-- Returns {1 or -1 (this call was applied before), events of a closed day, a string of one
-- character an event: '1' its name is tracked, '0' it counts as '(other)'}.
local day, pairs_key, marker = KEYS[1], KEYS[2], KEYS[3]
local ttl = tonumber(ARGV[1])
local max_names, max_keys, max_values = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local n = tonumber(ARGV[9])
local SEP = '\031'

local refused = wrong_type({day, 'hash', pairs_key, 'set'})
if refused then
  return refused
end

local function tracked_flags()
  -- a redelivery's answer: which names the day tracks (a name tracked stays so until the day goes)
  local flags, i = {}, 10
  for e = 1, n do
    flags[e] = redis.call('HEXISTS', day, 'e' .. SEP .. ARGV[i]) == 1 and '1' or '0'
    i = i + 5 + 3 * tonumber(ARGV[i + 4])
  end
  return table.concat(flags)
end

local go, marker_refused = dedupe_marker_claim(marker, ttl)
if not go then
  if marker_refused then
    return marker_refused
  end
  return {-1, 0, tracked_flags()}
end

local now, open_until, open = day_open(day, ARGV[2], ARGV[3], true)
local table_at = math.max(tonumber(ARGV[4]), now + tonumber(ARGV[5]))

-- the fields read once a call, parsed, and written back once at its end
local cache, dirty = {}, {}
local function get(field)
  local value = cache[field]
  if value == nil then
    value = redis.call('HGET', day, field) or false
    cache[field] = value
  end
  return value
end
local function put(field, value)
  if dirty[field] == nil then
    dirty[#dirty + 1] = field
    dirty[field] = true
  end
  cache[field] = value
end

local function event_entry(field)
  local value = get(field)
  if type(value) == 'table' then
    return value
  end
  local entry
  if value then
    local c, u, nv, d, cl, s = string.match(value, '^(%d+) (%d+) (%d+) (%d+) (%d+) ?(.*)$')
    entry = {tonumber(c), tonumber(u), tonumber(nv), tonumber(d), tonumber(cl), s}
  else
    entry = {0, 0, 0, 0, 0, ''}
  end
  cache[field] = entry
  return entry
end

local function value_entry(field, numbered)
  -- a (none)'s {count, sketch}, or (numbered) a value's {count, sketch, number}
  local value = get(field)
  if type(value) == 'table' then
    return value
  end
  local entry
  if numbered then
    local c, number, s = string.match(value or '0 0', '^(%d+) (%d+) ?(.*)$')
    entry = {tonumber(c), s, tonumber(number)}
  else
    local c, s = string.match(value or '0', '^(%d+) ?(.*)$')
    entry = {tonumber(c), s}
  end
  cache[field] = entry
  return entry
end

local function number(field)
  local value = get(field)
  return value and tonumber(value) or 0
end

local function keys_of(name)
  -- the name's tracked keys: a list, and a set
  local field = 'k' .. SEP .. name
  local value = get(field)
  if type(value) == 'table' then
    return value
  end
  local list, set = {}, {}
  if value then
    for key, digest in string.gmatch(value, '([^\031]+)\031([^\031]+)\031') do
      list[#list + 1] = key
      set[key] = digest
    end
  end
  local entry = {list = list, set = set}
  cache[field] = entry
  return entry
end

-- every field the events name, read with HMGETs of at most 1,000 before the loop (a (none) of a
-- key an event lacks is read as it comes)
do
  local wanted, seen = {}, {}
  local function want(field)
    if not seen[field] then
      seen[field] = true
      wanted[#wanted + 1] = field
    end
  end
  want('names')
  local at = 10
  for _ = 1, n do
    local name, k = ARGV[at], tonumber(ARGV[at + 4])
    want('e' .. SEP .. name)
    want('k' .. SEP .. name)
    for p = at + 5, at + 2 + 3 * k, 3 do
      local prefix = SEP .. name .. SEP .. ARGV[p]
      want('c' .. prefix)
      want('n' .. prefix)
      want('v' .. prefix .. SEP .. ARGV[p + 2])
      want('v' .. prefix .. SEP)
    end
    at = at + 5 + 3 * k
  end
  for from = 1, #wanted, 1000 do
    local last = math.min(from + 999, #wanted)
    local values = redis.call('HMGET', day, unpack(wanted, from, last))
    for w = from, last do
      cache[wanted[w]] = values[w - from + 1]
    end
  end
end

-- a value's or a (none)'s visitors of the call, added to its sketch once at the end (one PFADD a
-- sketch that is an HLL)
local pending, pending_fields = {}, {}
local function sighted(field, sid, hll)
  local waiting = pending[field]
  if not waiting then
    waiting = {hll = hll, ids = {}, seen = {}}
    pending[field] = waiting
    pending_fields[#pending_fields + 1] = field
  end
  if not waiting.seen[sid] then
    waiting.seen[sid] = true
    waiting.ids[#waiting.ids + 1] = sid
  end
end

local names = number('names')
local flags, closed_events = {}, 0
local i = 10
for e = 1, n do
  local name, name_digest, visitor, dropped, k = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local first = i + 5
  i = first + 3 * k
  local efield = 'e' .. SEP .. name
  local tracked = get(efield)
  if not tracked then
    if names < max_names then
      names = names + 1
      put('names', names)
      tracked = true
    end
  end
  if not tracked then
    name, name_digest, efield = '', '~', 'e' .. SEP
  end
  flags[e] = tracked and '1' or '0'
  local entry = event_entry(efield)
  local sid = visitor ~= '' and open and string.sub(visitor, 1, 6) or nil
  if tracked then
    local known = keys_of(name)
    local had = {}
    for p = first, first + 3 * (k - 1), 3 do
      local key, key_digest, value = ARGV[p], ARGV[p + 1], ARGV[p + 2]
      if not known.set[key] then
        if #known.list < max_keys then
          known.list[#known.list + 1] = key
          known.set[key] = key_digest
          put('k' .. SEP .. name, known)
          -- every event of the name so far lacked the key: its (none) starts as the name's figures
          local none_field = 'n' .. SEP .. name .. SEP .. key
          local none = value_entry(none_field)
          none[1], none[2] = entry[1], entry[6]
          if string.byte(entry[6], 1) == 35 then  -- ('#': the name's visitors are in its HLL)
            local none_hll = day .. ':z' .. key_digest
            redis.call('PFMERGE', none_hll, day .. ':e' .. name_digest)
            redis.call('EXPIREAT', none_hll, table_at)
          end
          put(none_field, none)
        else
          dropped = dropped + 1
          key = nil
        end
      end
      if key then
        had[key] = true
        local vfield = 'v' .. SEP .. name .. SEP .. key .. SEP .. value
        local counted
        if get(vfield) then
          counted = value_entry(vfield, true)
        else
          local cfield = 'c' .. SEP .. name .. SEP .. key
          local values = number(cfield)
          if values < max_values then
            put(cfield, values + 1)
            counted = value_entry(vfield, true)
            counted[3] = values + 1
          else
            vfield = 'v' .. SEP .. name .. SEP .. key .. SEP
            counted = value_entry(vfield, true)
          end
        end
        counted[1] = counted[1] + 1
        if sid then
          local number = counted[3]
          sighted(vfield, sid, number > 0 and day .. ':v' .. key_digest .. '.' .. number or day .. ':o' .. key_digest)
        end
        put(vfield, counted)
      end
    end
    for _, key in ipairs(known.list) do
      if not had[key] then
        local none_field = 'n' .. SEP .. name .. SEP .. key
        local none = value_entry(none_field)
        none[1] = none[1] + 1
        if sid then
          sighted(none_field, sid, day .. ':z' .. known.set[key])
        end
        put(none_field, none)
      end
    end
  end
  entry[1] = entry[1] + 1
  entry[4] = entry[4] + dropped
  if visitor == '' then
    entry[3] = entry[3] + 1
  elseif not open then
    entry[5] = entry[5] + 1
    closed_events = closed_events + 1
  elseif redis.call('SADD', pairs_key, visitor .. name_digest) == 1 then
    entry[2] = entry[2] + 1
    entry[6] = page_sketch_add(entry[6], sid, day .. ':e' .. name_digest)
  end
  put(efield, entry)
end

for _, field in ipairs(pending_fields) do
  local waiting, entry = pending[field], cache[field]
  local sketch = entry[2]
  if string.byte(sketch, 1) == 35 then  -- ('#': an HLL already)
    page_sketch_hll_add(waiting.hll, waiting.ids)
  else
    for _, sid in ipairs(waiting.ids) do
      sketch = page_sketch_with(sketch, sid, waiting.hll)
    end
    entry[2] = sketch
  end
end

-- written back: each changed field once, in HSETs of at most 500 fields
local out = {}
local function flush()
  if #out > 0 then
    redis.call('HSET', day, unpack(out))
    out = {}
  end
end
for _, field in ipairs(dirty) do
  local value = cache[field]
  local kind = string.sub(field, 1, 1)
  local text
  if type(value) ~= 'table' then
    text = value
  elseif kind == 'e' then
    text = string.format('%d %d %d %d %d', value[1], value[2], value[3], value[4], value[5])
    if value[6] ~= '' then
      text = text .. ' ' .. value[6]
    end
  elseif kind == 'k' then
    local parts = {}
    for _, key in ipairs(value.list) do
      parts[#parts + 1] = key .. SEP .. value.set[key] .. SEP
    end
    text = table.concat(parts)
  else
    text = value[3] and string.format('%d %d', value[1], value[3]) or string.format('%d', value[1])
    if value[2] ~= '' then
      text = text .. ' ' .. value[2]
    end
  end
  out[#out + 1] = field
  out[#out + 1] = text
  if #out >= 1000 then
    flush()
  end
end
flush()
if open then
  redis.call('EXPIREAT', pairs_key, open_until)
end
redis.call('EXPIREAT', day, table_at)
page_sketch_keep(table_at)
return {1, closed_events, table.concat(flags)}
