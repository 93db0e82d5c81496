-- Library: prepended by store/scripts.py to every script that calls page_sketch_add. A page's
-- (or a source's, or a who-visits value's) visitors of one day, kept after "<pv> <uv> " in the
-- day's table value so that its unique visitors over a range of days can be counted
-- (store/page_sketch.py reads it; the two must agree). Each visitor is its 6-character id (the
-- first 36 bits of the visitor id, as the first 6 characters of its pairs form, base64url). A
-- day's sketch is the list of those ids while it holds at most 256 (exact), then '#': the ids are
-- in a Redis HyperLogLog of its own (PFADD of each 6-character id; 0.81% standard error), the
-- key given by the caller: the table's key, ':', and the digest of the field (store/page_sketch.py's
-- hll_key). A call makes at most 24 lists into HLLs; a list past 256 waits, exact, for a later
-- call (up to 512 ids: page_sketch_stays_list). (Layout 1 kept 42 ids, then its own registers.)
-- A sketch of key layout 1 ('!' and 256 registers of the package's own HyperLogLog, ~6.5%) is
-- still read and added to as it is, until its day leaves retention.
-- page_sketch_add(sketch, id, key): the sketch with a visitor new to the page that day added.
-- page_sketch_add_all(sketch, ids, key): the same with several (a table), in one new string at most.
-- page_sketch_with(sketch, id, key): the sketch with a visitor added who may be in it already (a
-- source's sketch, kept without a pairs SET: an exact list is searched, an HLL takes it as is).
-- page_sketch_count(sketch, key): its distinct visitors: exact for a list, else the estimate.
-- page_sketch_keep(until): EXPIREAT of every HLL key the call wrote, at the end of a call.
local PAGE_SKETCH_B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
local PAGE_SKETCH_VALUE = {}
for n = 1, 64 do
  PAGE_SKETCH_VALUE[string.byte(PAGE_SKETCH_B64, n)] = n - 1
end
local PAGE_SKETCH_EXACT, PAGE_SKETCH_REGISTERS = 256, 256
local PAGE_SKETCH_CHANGES, PAGE_SKETCH_LONGEST = 24, 2 * 256
local page_sketch_changes_left = PAGE_SKETCH_CHANGES  -- (a script's locals are new at each call)
local page_sketch_written = {}  -- the HLL keys the call added to (page_sketch_keep)
local page_sketch_written_keys = {}

local function page_sketch_hll_add(key, ids, first)
  -- PFADD of ids[first..] (a table of 6-character ids) to an HLL sketch's key, 1,000 at a time
  for from = first or 1, #ids, 1000 do
    redis.call('PFADD', key, unpack(ids, from, math.min(from + 999, #ids)))
  end
  if not page_sketch_written[key] then
    page_sketch_written[key] = true
    page_sketch_written_keys[#page_sketch_written_keys + 1] = key
  end
  return '#'
end

local function page_sketch_to_hll(list, ids, key)
  -- a list's ids and more (a table) into the HLL of key: the sketch '#'
  local all = {}
  for at = 1, #list - 5, 6 do
    all[#all + 1] = string.sub(list, at, at + 5)
  end
  for _, id in ipairs(ids) do
    all[#all + 1] = id
  end
  return page_sketch_hll_add(key, all)
end

local function page_sketch_keep(until_at)
  for _, key in ipairs(page_sketch_written_keys) do
    redis.call('EXPIREAT', key, until_at)
  end
end
local PAGE_SKETCH_ZEROS = {}  -- the leading zeros of a 6-bit value (0..63; 6 for 0)
for x = 0, 63 do
  local zeros, rest = 6, x
  while rest > 0 do
    zeros = zeros - 1
    rest = math.floor(rest / 2)
  end
  PAGE_SKETCH_ZEROS[x] = zeros
end

local PAGE_SKETCH_HIGH, PAGE_SKETCH_MID, PAGE_SKETCH_MID_RANK = {}, {}, {}
for n = 1, 64 do  -- by a character's byte: what its value gives as the first or second character
  local byte, value = string.byte(PAGE_SKETCH_B64, n), n - 1
  PAGE_SKETCH_HIGH[byte] = value * 4 + 1  -- the register's first 6 bits (1-based)
  PAGE_SKETCH_MID[byte] = math.floor(value / 16)  -- its last 2
  PAGE_SKETCH_MID_RANK[byte] = value % 16 ~= 0 and PAGE_SKETCH_ZEROS[value % 16] - 1  -- the zeros of its 4 other bits, plus one; false: all 4 zero
end

local function page_sketch_rank_after(id)
  -- the value of an id whose 4 bits after its register are zero (1 id in 16): one plus the
  -- leading zeros of its 24 bits after them, 6 a character
  local values = PAGE_SKETCH_VALUE
  local b3, b4, b5, b6 = string.byte(id, 3, 6)
  local v = values[b3] or 0
  if v ~= 0 then
    return 5 + PAGE_SKETCH_ZEROS[v]
  end
  v = values[b4] or 0
  if v ~= 0 then
    return 11 + PAGE_SKETCH_ZEROS[v]
  end
  v = values[b5] or 0
  if v ~= 0 then
    return 17 + PAGE_SKETCH_ZEROS[v]
  end
  return 23 + PAGE_SKETCH_ZEROS[values[b6] or 0]
end

local function page_sketch_position(id)
  -- register (1-based) and value of a 6-character id: one plus the leading zeros of its 28 bits
  -- after the register's 8 (4 in its second character, then 6 a character), with no table made
  -- (a call per view of a source: the tables of the loop this replaced were 5/6 of its cost)
  local b1, b2 = string.byte(id, 1, 2)
  local register = (PAGE_SKETCH_HIGH[b1] or 1) + (PAGE_SKETCH_MID[b2] or 0)
  return register, PAGE_SKETCH_MID_RANK[b2] or page_sketch_rank_after(id)
end

local function page_sketch_stays_list(sketch, more)
  -- whether a list of ids stays one with more ids: up to PAGE_SKETCH_EXACT, and past it while
  -- the call has made PAGE_SKETCH_CHANGES lists into HLLs (a key made and 257 ids added each),
  -- up to PAGE_SKETCH_LONGEST ids; a later call makes it an HLL. A longer list is still exact
  -- (store/page_sketch.py reads any length).
  local ids = #sketch / 6 + more
  if ids <= PAGE_SKETCH_EXACT or (page_sketch_changes_left <= 0 and ids <= PAGE_SKETCH_LONGEST) then
    return true
  end
  page_sketch_changes_left = page_sketch_changes_left - 1
  return false
end

local function page_sketch_add(sketch, id, key)
  local first = string.byte(sketch, 1)
  if first == 35 then  -- ('#': an HLL of its own)
    return page_sketch_hll_add(key, {id})
  end
  if first ~= 33 then  -- ('!': registers of layout 1)
    if page_sketch_stays_list(sketch, 1) then
      return sketch .. id
    end
    return page_sketch_to_hll(sketch, {id}, key)
  end
  local register, rank = page_sketch_position(id)
  local held = PAGE_SKETCH_VALUE[string.byte(sketch, register + 1)] or 0
  if rank <= held then
    return sketch
  end
  return string.sub(sketch, 1, register) .. string.sub(PAGE_SKETCH_B64, rank + 1, rank + 1) ..
         string.sub(sketch, register + 2)
end

local function page_sketch_raise(sketch, items, position)
  -- a register sketch with each item's register raised to its value (position(item): register,
  -- value) where that is above the one held: one string of the pieces between the registers
  -- raised (a table of its 256 bytes cost more than the pieces of the few a call raises; the
  -- tables are made only when one is raised), or the sketch itself
  local raised, registers = nil, nil
  for _, item in ipairs(items) do
    local register, rank = position(item)
    if rank > (raised and raised[register] or PAGE_SKETCH_VALUE[string.byte(sketch, register + 1)] or 0) then
      raised, registers = raised or {}, registers or {}
      if not raised[register] then
        registers[#registers + 1] = register
      end
      raised[register] = rank
    end
  end
  if not raised then
    return sketch
  end
  table.sort(registers)
  local pieces, from = {}, 1
  for _, register in ipairs(registers) do
    local rank = raised[register]
    pieces[#pieces + 1] = string.sub(sketch, from, register)
    pieces[#pieces + 1] = string.sub(PAGE_SKETCH_B64, rank + 1, rank + 1)
    from = register + 2
  end
  pieces[#pieces + 1] = string.sub(sketch, from)
  return table.concat(pieces)
end

local function page_sketch_add_all(sketch, ids, key)
  -- the sketch with visitors new to it added (ids: a table of ids, none in it yet), making one
  -- new string at most
  if #ids == 1 then
    return page_sketch_add(sketch, ids[1], key)
  end
  local first = string.byte(sketch, 1)
  if first == 35 then
    return page_sketch_hll_add(key, ids)
  end
  if first ~= 33 then
    if page_sketch_stays_list(sketch, #ids) then
      return sketch .. table.concat(ids)
    end
    return page_sketch_to_hll(sketch, ids, key)
  end
  return page_sketch_raise(sketch, ids, page_sketch_position)
end

local function page_sketch_with(sketch, id, key)
  local first = string.byte(sketch, 1)
  if first == 35 then
    return page_sketch_hll_add(key, {id})
  end
  if first ~= 33 then
    local at = string.find(sketch, id, 1, true)  -- a plain search, then only an id's own place counts
    while at do
      if at % 6 == 1 then
        return sketch
      end
      at = string.find(sketch, id, at + 1, true)
    end
  end
  return page_sketch_add(sketch, id, key)
end

local PAGE_SKETCH_WEIGHT = {}  -- a register character's 2^-value, by its byte (0 for no value: 1)
for n = 1, 64 do
  PAGE_SKETCH_WEIGHT[string.byte(PAGE_SKETCH_B64, n)] = 2 ^ (-(n - 1))
end

local function page_sketch_count(sketch, key)
  local first = string.byte(sketch, 1)
  if first == 35 then
    return redis.call('PFCOUNT', key)
  end
  if first ~= 33 then
    return math.floor(#sketch / 6)
  end
  local m, sum, zeros = PAGE_SKETCH_REGISTERS, 0, 0
  local weights, zero = PAGE_SKETCH_WEIGHT, string.byte(PAGE_SKETCH_B64, 1)
  local bytes = {string.byte(sketch, 2, PAGE_SKETCH_REGISTERS + 1)}  -- (one call for all of them)
  for n = 1, PAGE_SKETCH_REGISTERS do
    local byte = bytes[n]
    sum = sum + (weights[byte] or 1)
    if byte == zero or not weights[byte] then
      zeros = zeros + 1
    end
  end
  local raw = 0.7213 / (1 + 1.079 / m) * m * m / sum
  if raw <= 2.5 * m and zeros > 0 then
    return math.floor(m * math.log(m / zeros) + 0.5)
  end
  return math.floor(raw + 0.5)
end
