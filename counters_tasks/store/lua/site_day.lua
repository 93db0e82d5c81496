-- Count page views of one local day of one site: its PV/UV of the day, and each path's and each
-- source's, in one slot.
-- KEYS: the day's totals HASH (pv, uv, open_until), visitors SET (HLL in hll mode), range
--       HLL, visitor-entry pairs SET, then T tables (HASH each: the pages, then the sources of
--       the views, docs/keys.md), then (when ARGV[1] > 0) the dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), visitors expire-at
--       (epoch s, from the day), visitors kept (s, from now), totals expire-at (from the day),
--       totals kept (s, from now), n, then the n views' visitor ids, then T, then per table:
--       the most fields it tracks, its mode ('pairs' for the pages, 'sketch' for a source), m, then per entry: the field (a path, a source), its digest,
--       k, then the k visitors of its views in their pairs form (11 characters; the n views
--       grouped by entry; each entry once: one HMGET and one HSET a 1,000 entries take them).
-- A table maps an entry to "<pv> <uv> <sketch>" (the sketch: its visitors of the day, for its
-- UV over a range; page_sketch.lua); once it tracks its most fields, views of other entries
-- count under the field "" (shown as "(other)"). A page's UV is kept exact by the pairs SET of
-- "<visitor><path digest>" members ("<visitor>" alone for the overflow, which has no sketch);
-- a source's UV is its sketch's count (exact up to 42 visitors a day, then estimated), which
-- costs no pairs member.
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
local ntables = tonumber(ARGV[8 + n])
local marker = KEYS[5 + ntables]
local checks = {totals, 'hash', visitors, hll and 'string' or 'set', range_hll, 'string', pairs, 'set'}
for t = 1, ntables do
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
local now = tonumber(redis.call('TIME')[1])
local open_until = tonumber(redis.call('HGET', totals, 'open_until'))
if not open_until then
  if redis.call('EXISTS', totals) == 1 then
    open_until = 0  -- counted before open_until existed, and its visitors are gone
  else
    open_until = math.max(tonumber(ARGV[3]), now + tonumber(ARGV[4]))
    redis.call('HSET', totals, 'open_until', open_until)
  end
end
local open = open_until > now
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
    entries[#entries + 1] = {path, value, first, last, #members}
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
            sketch = page_sketch_add(sketch, string.sub(ARGV[a], 1, 6))
          end
        end
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

local function count_sketch_table(table_key, i)
  -- one table of sources from ARGV[i] on (no pairs: each entry's UV is its sketch's count,
  -- page_sketch_with); returns where the next begins
  local max_fields, nentries = tonumber(ARGV[i]), tonumber(ARGV[i + 2])
  local names, spans = {}, {}
  i = i + 3
  for e = 1, nentries do
    local k = tonumber(ARGV[i + 1])
    names[e], spans[e] = ARGV[i], {i + 2, i + 1 + k}
    i = i + 2 + k
  end
  if nentries == 0 then
    return i
  end
  local values = hash_total_read(table_key, names)
  local tracked = nil
  local found = {}  -- field -> {pv, sketch}, in the order first met
  local order = {}
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
      found[field] = {pv, sketch, uv, sketch}  -- (the last two: as read, so an unchanged sketch is not counted again)
      order[#order + 1] = field
    end
    local entry = found[field]
    local first, last = spans[e][1], spans[e][2]
    entry[1] = entry[1] + (last - first + 1)
    if open then
      for a = first, last do
        entry[2] = page_sketch_with(entry[2], string.sub(ARGV[a], 1, 6))
      end
    end
  end
  local updates = {}
  for _, field in ipairs(order) do
    local entry = found[field]
    local uv = entry[3]
    if entry[2] ~= entry[4] then  -- (a register sketch's count reads its 256 registers)
      uv = page_sketch_count(entry[2])
    end
    updates[#updates + 1] = field
    updates[#updates + 1] = format(entry[1], uv, entry[2])
  end
  hash_total_send('HSET', table_key, updates, 2000)
  redis.call('EXPIREAT', table_key, totals_at)
  return i
end

local at = 8 + n + 1
for t = 1, ntables do
  if ARGV[at + 1] == 'pairs' then
    at = count_table(KEYS[4 + t], at)
  else
    at = count_sketch_table(KEYS[4 + t], at)
  end
end
if open and redis.call('EXISTS', pairs) == 1 then
  redis.call('EXPIREAT', pairs, open_until)
end
for _, key in ipairs({totals, range_hll}) do
  redis.call('EXPIREAT', key, totals_at)
end
if open then
  return 0
end
return n
