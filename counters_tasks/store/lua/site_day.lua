-- Count page views of one local day of one site: its PV/UV of the day, and each path's and each
-- source's, in one slot.
-- KEYS: the day's totals HASH (pv, uv, open_until), visitors SET (HLL in hll mode), range
--       HLL, visitor-entry pairs SET, then T tables (HASH each: the pages, then the sources of
--       the views, docs/keys.md), then (with who visits) its five tables and its sketches
--       HASH, then (when ARGV[1] > 0) the dedupe marker (of `<message id>/v<n>`: the n-th part of a
--       day's views of a message, a function of the message alone: sitestats/site_day.py `_parts`).
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), visitors expire-at
--       (epoch s, from the day), visitors kept (s, from now), totals expire-at (from the day),
--       totals kept (s, from now), n, then the n views' visitor ids, then their 6-character
--       ids (page_sketch.lua) in one string, then (with who visits; else '') each view's pairs
--       member of its visitor and its five values (19 characters) in one string, then T, then
--       per table: the most fields it tracks, its mode, m, then for the pages ('pairs'), per
--       entry: the field (a path), its digest,
--       k, then the k visitors of its views in their pairs form (11 characters; the n views
--       grouped by entry; each entry once: one HMGET and one HSET a 1,000 entries take them);
--       for a source ('sketch'): its m fields, their m digests, then a string of n bytes, each
--       view's field number (1..m; 0: the view has none in this table); then (with who visits)
--       its arguments, below at "who visits".
-- A table maps an entry to "<pv> <uv> <sketch>" (the sketch: its visitors of the day, for its
-- UV over a range; page_sketch.lua: a list of ids, or '#' and an HLL under the table's key,
-- ':' and the entry's digest); once it tracks its most fields, views of other entries
-- count under the field "" (shown as "(other)"). A page's UV is kept exact by the pairs SET of
-- "<visitor><path digest>" members ("<visitor>" alone for the overflow, which has no sketch);
-- a source's UV is its sketch's count (exact up to 256 visitors a day, then Redis's HLL
-- estimate), which costs no pairs member.
-- A day is open until totals.open_until, fixed by the day's first write, however old the day
-- (history can be back-filled): the later of the visitors' day-based expiry and "kept" seconds
-- from that write. The visitors and pairs expire then. A view of a closed day (totals left,
-- visitors gone) counts in PV only: its visitor can no longer be deduplicated. Totals, range
-- HLL and tables live until the later of their day-based expiry and "kept" from the latest write.
-- Every key's type is checked before the first write (wrong_type).
-- Returns the number of views of a closed day (counted without UV), or -1 when this message
-- was already applied here.
local totals, visitors, range_hll, pairs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl = tonumber(ARGV[1])
local hll = ARGV[2] == 'hll'
local n = tonumber(ARGV[7])
local short_ids = ARGV[8 + n]
local profiles = ARGV[9 + n]
local ntables = tonumber(ARGV[10 + n])
local nwho = profiles ~= '' and 6 or 0  -- who visits: five tables of page views, one of sketches
local marker = KEYS[5 + ntables + nwho]
local checks = {totals, 'hash', visitors, hll and 'string' or 'set', range_hll, 'string', pairs, 'set'}
for t = 1, ntables + nwho do
  checks[#checks + 1] = KEYS[4 + t]
  checks[#checks + 1] = 'hash'
end
local refused = wrong_type(checks)
if refused then
  return refused
end
local go, marker_refused = dedupe_marker_claim(marker, ttl)  -- (the marker's type checked there)
if not go then
  return marker_refused or -1
end
local now, open_until, open = day_open(totals, ARGV[3], ARGV[4], true)
local totals_at = math.max(tonumber(ARGV[5]), now + tonumber(ARGV[6]))

redis.call('HINCRBY', totals, 'pv', n)
local ids = {}
for a = 8, 7 + n do
  ids[#ids + 1] = ARGV[a]
end
if open then
  if hll then
    for from = 1, #ids, 1000 do
      redis.call('PFADD', visitors, unpack(ids, from, math.min(from + 999, #ids)))
    end
    redis.call('HSET', totals, 'uv', redis.call('PFCOUNT', visitors))
  else
    local new = 0
    for from = 1, #ids, 1000 do  -- SADD counts each new member once, repeated or not
      new = new + redis.call('SADD', visitors, unpack(ids, from, math.min(from + 999, #ids)))
    end
    if new > 0 then
      redis.call('HINCRBY', totals, 'uv', new)
    end
  end
  redis.call('EXPIREAT', visitors, open_until)
end
for from = 1, #ids, 1000 do
  redis.call('PFADD', range_hll, unpack(ids, from, math.min(from + 999, #ids)))
end

-- the tables (pages, sources): their entries' values read with one HMGET, which are tracked
-- (HLEN read once, counted on as new entries join), and their views' pair members, looked up
-- with one SMISMEMBER and added with one SADD per 1,000
local function parse(value)
  if not value then
    return 0, 0, ''
  end
  local p, u, s = string.match(value, '^(%-?%d+) (%d+) ?(.*)$')
  return tonumber(p), tonumber(u), s
end

local function format(pv, uv, sketch)
  if sketch == '' then
    return string.format('%d %d', pv, uv)
  end
  return string.format('%d %d ', pv, uv) .. sketch
end

local function count_table(pages, i)
  -- one table (the pages, or one kind of source) from ARGV[i] on; returns where the next begins
  local max_paths = tonumber(ARGV[i])
  local npaths = tonumber(ARGV[i + 2])
  if npaths == 0 then
    return i + 3
  end
  local entries, members = {}, {}
  local tracked = nil
  local names = {}
  local start = i + 3
  i = start
  for p = 1, npaths do
    names[p] = ARGV[i]
    i = i + 3 + tonumber(ARGV[i + 2])
  end
  local finish = i
  local values = hash_total_read(pages, names)  -- (its type was checked above)
  i = start
  for p = 1, npaths do
    local path, digest, k = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
    local first, last = i + 3, i + 2 + k
    i = last + 1
    local value = values[p]
    if not value then
      tracked = tracked or redis.call('HLEN', pages)
      if tracked >= max_paths then
        path, digest = '', ''  -- counted under "(other)", read below with the other overflowing paths
      else
        tracked = tracked + 1
      end
    end
    entries[#entries + 1] = {path, value, first, last, #members, digest}
    if open then
      for a = first, last do
        members[#members + 1] = ARGV[a] .. digest
      end
    end
  end
  local is_new = {}  -- member -> true while it is new to the day (until its first view below)
  for from = 1, #members, 1000 do
    local part = {unpack(members, from, math.min(from + 999, #members))}
    local found = redis.call('SMISMEMBER', pairs, unpack(part))
    for p = 1, #part do
      if found[p] == 0 then
        is_new[part[p]] = true
      end
    end
    redis.call('SADD', pairs, unpack(part))
  end

  local other = nil  -- {pv, uv} of the overflow field "", read once
  local updates = {}  -- field, value, ...: written with one HSET
  for _, entry in ipairs(entries) do
    local path, value, first, last, offset = entry[1], entry[2], entry[3], entry[4], entry[5]
    local pv, uv, sketch
    local new_ids = {}
    if path == '' then
      if not other then
        local p, u = parse(redis.call('HGET', pages, ''))
        other = {p, u}
      end
      pv, uv, sketch = other[1], other[2], ''
    else
      pv, uv, sketch = parse(value)
    end
    pv = pv + (last - first + 1)
    if open then
      for a = first, last do
        local member = members[offset + a - first + 1]
        if is_new[member] then
          is_new[member] = nil
          uv = uv + 1
          if path ~= '' then
            new_ids[#new_ids + 1] = string.sub(ARGV[a], 1, 6)
          end
        end
      end
      if #new_ids > 0 then
        sketch = page_sketch_add_all(sketch, new_ids, pages .. ':' .. entry[6])
      end
    end
    if path == '' then
      other = {pv, uv}
    else
      updates[#updates + 1] = path
      updates[#updates + 1] = format(pv, uv, sketch)
    end
  end
  if other then
    updates[#updates + 1] = ''
    updates[#updates + 1] = format(other[1], other[2], '')
  end
  hash_total_send('HSET', pages, updates, 2000)
  redis.call('EXPIREAT', pages, totals_at)
  return finish
end

-- each view's 6-character id and its register sketch position, worked out once for every table
local view_ids, view_registers, view_ranks = {}, {}, {}
local function view_position(v)
  local register = view_registers[v]
  if not register then
    local rank
    register, rank = page_sketch_position(view_ids[v])
    view_registers[v], view_ranks[v] = register, rank
  end
  return register, view_ranks[v]
end
for v = 1, n do
  view_ids[v] = string.sub(short_ids, 6 * v - 5, 6 * v)
end

-- which views show their visitor's profile (its five values of who visits) for the first time
-- today: one SMISMEMBER and one SADD for the call; only those views are added to who sketches
local fresh_profile = {}
if open and profiles ~= '' then
  local members = {}
  for v = 1, n do
    members[v] = string.sub(profiles, 19 * v - 18, 19 * v)
  end
  local found = redis.call('SMISMEMBER', pairs, unpack(members))
  local new = {}
  for v = 1, n do
    if found[v] == 0 and not fresh_profile[members[v]] and string.byte(members[v], 12) ~= 126 then  -- ('~': none)
      fresh_profile[members[v]] = true
      fresh_profile[v] = true
      new[#new + 1] = members[v]
    end
  end
  if #new > 0 then
    redis.call('SADD', pairs, unpack(new))
  end
end

local function sketch_with_views(sketch, views, key)
  -- the sketch with the visitors of views (view numbers) added, making one new string at most
  -- (a string a visitor made Lua's allocation and collection the larger part of the work); an
  -- HLL sketch ('#') takes them all in one PFADD, already there or not
  local first = string.byte(sketch, 1)
  if first == 35 then
    local ids = {}
    for _, v in ipairs(views) do
      ids[#ids + 1] = view_ids[v]
    end
    return page_sketch_hll_add(key, ids)
  end
  local list = first ~= 33
  if #views == 1 then  -- (the common case: no table made)
    if list then
      return page_sketch_with(sketch, view_ids[views[1]], key)
    end
    local register, rank = view_position(views[1])
    if rank <= (PAGE_SKETCH_VALUE[string.byte(sketch, register + 1)] or 0) then
      return sketch
    end
    return string.sub(sketch, 1, register) .. string.sub(PAGE_SKETCH_B64, rank + 1, rank + 1) ..
           string.sub(sketch, register + 2)
  end
  if list then  -- a list: the ids not in it yet, each once
    local new, seen = {}, {}
    for _, v in ipairs(views) do
      local id = view_ids[v]
      if not seen[id] then
        seen[id] = true
        local at = string.find(sketch, id, 1, true)
        while at and at % 6 ~= 1 do  -- only an id's own place counts
          at = string.find(sketch, id, at + 1, true)
        end
        if not at then
          new[#new + 1] = id
        end
      end
    end
    return #new > 0 and page_sketch_add_all(sketch, new, key) or sketch
  end
  return page_sketch_raise(sketch, views, view_position)  -- registers: the few raised, in one string
end

local function count_sketch_table(table_key, i)
  -- one table of sources from ARGV[i] on (no pairs: each entry's UV comes from its sketch,
  -- sketch_with_views); returns where the next begins. A list sketch's count is
  -- stored with it; a register sketch's stored count is the one it had when it became one
  -- (its readers count the registers: store/page_sketch.py), as counting 256 registers at every
  -- change took a third of the table's time.
  local max_fields, nentries = tonumber(ARGV[i]), tonumber(ARGV[i + 2])
  local names = {unpack(ARGV, i + 3, i + 2 + nentries)}
  local marks = ARGV[i + 3 + 2 * nentries]
  local finish = i + 4 + 2 * nentries
  if nentries == 0 then
    return finish
  end
  local values = hash_total_read(table_key, names)
  local tracked = nil
  local found = {}  -- field -> {pv, sketch, uv as read, sketch as read, its views in the call}
  local order = {}
  local entry_of = {}  -- field number -> its entry
  for e = 1, nentries do
    local field = names[e]
    if not values[e] and not found[field] then
      tracked = tracked or redis.call('HLEN', table_key)
      if tracked >= max_fields then
        field = ''  -- "(other)"
      else
        tracked = tracked + 1
      end
    end
    if not found[field] then
      local value = values[e]
      if field == '' and not value then
        value = redis.call('HGET', table_key, '')
      end
      local pv, uv, sketch = parse(value or nil)
      local digest = field == '' and '~' or ARGV[i + 2 + nentries + e]  -- ("(other)"'s HLL: '~')
      found[field] = {pv, sketch, uv, sketch, {}, table_key .. ':' .. digest}  -- (as read: an unchanged sketch is not counted again; its views; its HLL's key)
      order[#order + 1] = field
    end
    entry_of[e] = found[field]
  end
  for v = 1, n do
    local entry = entry_of[string.byte(marks, v)]
    if entry then  -- (byte 0: no field of this table)
      entry[1] = entry[1] + 1
      local views = entry[5]
      views[#views + 1] = v
    end
  end
  if open then
    for _, field in ipairs(order) do
      local entry = found[field]
      entry[2] = sketch_with_views(entry[2], entry[5], entry[6])
    end
  end
  local updates = {}
  for _, field in ipairs(order) do
    local entry = found[field]
    local uv = entry[3]
    if entry[2] ~= entry[4] and string.byte(entry[4], 1) ~= 33 then  -- a list, or one that became registers
      uv = page_sketch_count(entry[2], entry[6])
    end
    updates[#updates + 1] = field
    updates[#updates + 1] = format(entry[1], uv, entry[2])
  end
  hash_total_send('HSET', table_key, updates, 2000)
  redis.call('EXPIREAT', table_key, totals_at)
  return finish
end

local at = 8 + n + 3
for t = 1, ntables do
  if ARGV[at + 1] == 'pairs' then
    at = count_table(KEYS[4 + t], at)
  else
    at = count_sketch_table(KEYS[4 + t], at)
  end
end

-- who visits (ARGV from at on): the most values a table tracks, then per table (five): its
-- letter, m, its m values, their m digests, their m page view counts, then a string of n bytes
-- (each view's value number, 1..m). A table (KEYS[5 + T] on) maps a value to its page views; the
-- sketches (KEYS[10 + T]) map "<letter>:<value>" to its visitors of the day (an HLL sketch under
-- the sketches' key, ':', the letter and the value's digest, '~' for ""), worked only for the
-- views whose profile is fresh (above). Past the cap, a new value counts under "" ("(other)").
if nwho > 0 then
  local sketch_key = KEYS[10 + ntables]
  local cap = tonumber(ARGV[at])
  at = at + 1
  local fresh_views = {}
  if open then
    for v = 1, n do
      if fresh_profile[v] then
        fresh_views[#fresh_views + 1] = v
      end
    end
  end
  local names, adds, hll_keys = {}, {}, {}  -- the sketches to work: "<letter>:<value>" -> views to add, its HLL's key
  for t = 1, 5 do
    local key = KEYS[4 + ntables + t]
    local letter, m = ARGV[at], tonumber(ARGV[at + 1])
    local marks = ARGV[at + 2 + 3 * m]
    local counted = {}  -- value number -> the value it counts under (itself, or "" past the cap)
    local values = hash_total_read(key, {unpack(ARGV, at + 2, at + 1 + m)})
    local totals, order, tracked = {}, {}, nil
    for e = 1, m do
      local value, pv = ARGV[at + 1 + e], tonumber(ARGV[at + 1 + 2 * m + e])
      local digest = ARGV[at + 1 + m + e]
      local total = tonumber(values[e])
      if not total and not totals[value] then  -- new to the day: within the cap?
        tracked = tracked or (redis.call('HLEN', key) - redis.call('HEXISTS', key, ''))
        if tracked >= cap then
          value = ''
        else
          tracked = tracked + 1
        end
      end
      if not totals[value] then
        order[#order + 1] = value
        totals[value] = total or (value == '' and tonumber(redis.call('HGET', key, ''))) or 0
      end
      totals[value] = totals[value] + pv
      counted[e] = letter .. ':' .. value
      hll_keys[counted[e]] = sketch_key .. ':' .. letter .. (value == '' and '~' or digest)
    end
    local updates = {}
    for _, value in ipairs(order) do
      updates[#updates + 1] = value
      updates[#updates + 1] = totals[value]
    end
    hash_total_send('HSET', key, updates, 2000)
    at = at + 3 + 3 * m
    for _, v in ipairs(fresh_views) do
      local name = counted[string.byte(marks, v)]
      if name then
        local views = adds[name]
        if not views then
          views = {}
          adds[name] = views
          names[#names + 1] = name
        end
        views[#views + 1] = v
      end
    end
    redis.call('EXPIREAT', key, totals_at)
  end
  if #names > 0 then
    local sketches = hash_total_read(sketch_key, names)
    local updates = {}
    for s, name in ipairs(names) do
      local before = sketches[s] or ''
      local sketch = sketch_with_views(before, adds[name], hll_keys[name])
      if sketch ~= before then
        updates[#updates + 1] = name
        updates[#updates + 1] = sketch
      end
    end
    hash_total_send('HSET', sketch_key, updates, 2000)
    redis.call('EXPIREAT', sketch_key, totals_at)
  end
end
if open then
  redis.call('EXPIREAT', pairs, open_until)  -- (nothing when no view made a member)
end
for _, key in ipairs({totals, range_hll}) do
  redis.call('EXPIREAT', key, totals_at)
end
page_sketch_keep(totals_at)  -- the HLL sketches written, kept as their tables
if open then
  return 0
end
return n
