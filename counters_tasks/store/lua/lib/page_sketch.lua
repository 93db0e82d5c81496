-- Library: prepended by store/scripts.py to every script that calls page_sketch_add. A page's
-- visitors of one day, kept after "<pv> <uv> " in the day's pages HASH value so that a page's
-- unique visitors over a range of days can be counted (store/page_sketch.py reads it; the two
-- must agree). Each visitor is its 6-character id (the first 36 bits of the visitor id, as the
-- first 6 characters of its pairs form, base64url). A day's sketch is the list of those ids
-- while it holds at most 42 (exact), then '!' and 256 HyperLogLog registers, one base64url
-- character each (~6.5% standard error): register = the id's first 8 bits, value = one plus
-- the leading zeros of its other 28 bits.
-- page_sketch_add(sketch, id): the sketch with a visitor new to the page that day added.
-- page_sketch_with(sketch, id): the sketch with a visitor added who may be in it already (a
-- source's sketch, kept without a pairs SET: an exact list is searched, registers take a max).
-- page_sketch_count(sketch): its distinct visitors: exact for a list, else the HyperLogLog
-- estimate (store/page_sketch.py's ``estimate``).
local PAGE_SKETCH_B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
local PAGE_SKETCH_VALUE = {}
for n = 1, 64 do
  PAGE_SKETCH_VALUE[string.byte(PAGE_SKETCH_B64, n)] = n - 1
end
local PAGE_SKETCH_EXACT, PAGE_SKETCH_REGISTERS = 42, 256
local PAGE_SKETCH_ZEROS = {}  -- the leading zeros of a 6-bit value (0..63; 6 for 0)
for x = 0, 63 do
  local zeros, rest = 6, x
  while rest > 0 do
    zeros = zeros - 1
    rest = math.floor(rest / 2)
  end
  PAGE_SKETCH_ZEROS[x] = zeros
end

local function page_sketch_position(id)
  -- register (1-based) and value of a 6-character id: one plus the leading zeros of its 28 bits
  -- after the register's 8 (4 in its second character, then 6 a character), with no table made
  -- (a call per view of a source: the tables of the loop this replaced were 5/6 of its cost)
  local values = PAGE_SKETCH_VALUE
  local b1, b2, b3, b4, b5, b6 = string.byte(id, 1, 6)
  local v2 = values[b2] or 0
  local register = (values[b1] or 0) * 4 + math.floor(v2 / 16) + 1
  local low = v2 % 16
  if low ~= 0 then
    return register, PAGE_SKETCH_ZEROS[low] - 1  -- its zeros in 4 bits, plus one
  end
  local v = values[b3] or 0
  if v ~= 0 then
    return register, 5 + PAGE_SKETCH_ZEROS[v]
  end
  v = values[b4] or 0
  if v ~= 0 then
    return register, 11 + PAGE_SKETCH_ZEROS[v]
  end
  v = values[b5] or 0
  if v ~= 0 then
    return register, 17 + PAGE_SKETCH_ZEROS[v]
  end
  return register, 23 + PAGE_SKETCH_ZEROS[values[b6] or 0]
end

local function page_sketch_add(sketch, id)
  local registers
  if string.sub(sketch, 1, 1) ~= '!' then
    if #sketch < PAGE_SKETCH_EXACT * 6 then
      return sketch .. id
    end
    registers = {}
    for n = 1, PAGE_SKETCH_REGISTERS do
      registers[n] = 0
    end
    for at = 1, #sketch, 6 do
      local register, rank = page_sketch_position(string.sub(sketch, at, at + 5))
      registers[register] = math.max(registers[register], rank)
    end
    local register, rank = page_sketch_position(id)
    registers[register] = math.max(registers[register], rank)
    local chars = {'!'}
    for n = 1, PAGE_SKETCH_REGISTERS do
      chars[n + 1] = string.sub(PAGE_SKETCH_B64, registers[n] + 1, registers[n] + 1)
    end
    return table.concat(chars)
  end
  local register, rank = page_sketch_position(id)
  local held = PAGE_SKETCH_VALUE[string.byte(sketch, register + 1)] or 0
  if rank <= held then
    return sketch
  end
  return string.sub(sketch, 1, register) .. string.sub(PAGE_SKETCH_B64, rank + 1, rank + 1) ..
         string.sub(sketch, register + 2)
end


local function page_sketch_with(sketch, id)
  if string.sub(sketch, 1, 1) ~= '!' then
    local at = string.find(sketch, id, 1, true)  -- a plain search, then only an id's own place counts
    while at do
      if at % 6 == 1 then
        return sketch
      end
      at = string.find(sketch, id, at + 1, true)
    end
  end
  return page_sketch_add(sketch, id)
end

local PAGE_SKETCH_WEIGHT = {}  -- a register character's 2^-value, by its byte (0 for no value: 1)
for n = 1, 64 do
  PAGE_SKETCH_WEIGHT[string.byte(PAGE_SKETCH_B64, n)] = 2 ^ (-(n - 1))
end

local function page_sketch_count(sketch)
  if string.sub(sketch, 1, 1) ~= '!' then
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
