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

local function page_sketch_position(id)
  -- register (1-based) and value of a 6-character id
  local v = {}
  for n = 1, 6 do
    v[n] = PAGE_SKETCH_VALUE[string.byte(id, n)] or 0
  end
  local register = v[1] * 4 + math.floor(v[2] / 16) + 1
  local rank = 1
  local parts = {{v[2] % 16, 4}, {v[3], 6}, {v[4], 6}, {v[5], 6}, {v[6], 6}}
  for _, part in ipairs(parts) do
    local value, width = part[1], part[2]
    if value == 0 then
      rank = rank + width
    else
      local length = 0
      while value > 0 do
        length = length + 1
        value = math.floor(value / 2)
      end
      rank = rank + width - length
      break
    end
  end
  return register, rank
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
    for at = 1, #sketch, 6 do
      if string.sub(sketch, at, at + 5) == id then
        return sketch
      end
    end
  end
  return page_sketch_add(sketch, id)
end

local function page_sketch_count(sketch)
  if string.sub(sketch, 1, 1) ~= '!' then
    return math.floor(#sketch / 6)
  end
  local m, sum, zeros = PAGE_SKETCH_REGISTERS, 0, 0
  for n = 2, PAGE_SKETCH_REGISTERS + 1 do
    local value = PAGE_SKETCH_VALUE[string.byte(sketch, n)] or 0
    sum = sum + 2 ^ (-value)
    if value == 0 then
      zeros = zeros + 1
    end
  end
  local raw = 0.7213 / (1 + 1.079 / m) * m * m / sum
  if raw <= 2.5 * m and zeros > 0 then
    return math.floor(m * math.log(m / zeros) + 0.5)
  end
  return math.floor(raw + 0.5)
end
