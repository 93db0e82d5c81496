-- Drop one board's expired slots, subtracting each from the top ZSET exactly once.
-- KEYS: the board's meta HASH, top ZSET, slot index ZSET.
-- ARGV: slot hash name head, tail, now_slot, period_hours, interval_hours ('' = the stored
--       settings), budget (members to subtract in this call at most, so one call stays short).
-- The rotation point meta.rot only moves forward: slots < rot are expired, writes to them are
-- refused as late. A member is subtracted and HDEL'd in the same call, so a retried or repeated
-- rotation finds nothing left to subtract; a big slot may take several calls, and between them
-- the invariant top = -(sum of the indexed slot hashes) still holds. Such a slot is read a page
-- (HSCAN) at a time from the cursor kept in meta.rcur ('<slot> <cursor>'), so each call's cost
-- follows its budget, not the slot's size.
-- Returns {slots dropped, members subtracted, 1 when the budget ran out (call again) else 0},
-- {0, 0, 0} when the board does not exist (nothing written), -1 other settings, -5 the board is
-- being rebuilt or deleted (the caller finishes that first), or
-- {-2, dropped, subtracted} when an indexed slot hash is missing (expired by its TTL: rebuild).
-- Every key's type, the expired slot hashes' included, is checked before the first write
-- (wrong_type): a key changed by hand fails the call naming it, with nothing written.
local refused = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'zset'})
if refused then
  return refused
end
local meta = redis.call('HMGET', KEYS[1], 'period', 'interval', 'wm', 'rot', 'rb', 'del')
if meta[5] or meta[6] then
  return -5
end
if not meta[1] then
  return {0, 0, 0}
end
if ARGV[4] ~= '' and (meta[1] ~= ARGV[4] or meta[2] ~= ARGV[5]) then
  return -1
end
local n = tonumber(meta[1]) / tonumber(meta[2])
local now_slot = tonumber(ARGV[3])
local rot = tonumber(meta[4])
local target = now_slot - n + 1
local moved = not rot or target > rot
if moved then
  rot = target
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. rot)
refused = wrong_type_of_each(ARGV[1], expired, ARGV[2], 'hash')
if refused then
  return refused
end
if moved then
  redis.call('HSET', KEYS[1], 'rot', rot)
end
if not tonumber(meta[3]) or now_slot > tonumber(meta[3]) then
  redis.call('HSET', KEYS[1], 'wm', ARGV[3])
end
local budget = tonumber(ARGV[6])
local dropped, subtracted = 0, 0

local function subtract(kv)
  local fields = {}
  for i = 1, #kv, 2 do
    if tonumber(redis.call('ZINCRBY', KEYS[2], kv[i + 1], kv[i])) == 0 then
      redis.call('ZREM', KEYS[2], kv[i])
    end
    fields[#fields + 1] = kv[i]
  end
  return fields
end

-- the HSCAN cursor kept for slot s (meta.rcur = '<slot> <cursor>'), or nil
local function kept_cursor(s)
  local kept = redis.call('HGET', KEYS[1], 'rcur')
  if kept and string.sub(kept, 1, #s + 1) == s .. ' ' then
    return string.sub(kept, #s + 2)
  end
  return nil
end

for _, s in ipairs(expired) do
  if budget <= 0 then
    return {dropped, subtracted, 1}
  end
  local key = ARGV[1] .. s .. ARGV[2]
  local size = redis.call('HLEN', key)
  if size == 0 then
    return {-2, dropped, subtracted}
  end
  if size <= budget then
    subtract(redis.call('HGETALL', key))
    redis.call('DEL', key)
    subtracted = subtracted + size
    budget = budget - size
  else
    -- a big slot: HSCAN pages from where the last call stopped (meta.rcur = '<slot> <cursor>'),
    -- never from 0 again: a scan restarted at 0 walks every bucket the earlier calls emptied,
    -- which made a call's cost grow with the slot's size
    local cursor = kept_cursor(s) or '0'
    local pages = 0
    repeat
      local page = redis.call('HSCAN', key, cursor, 'COUNT', budget)
      cursor = page[1]
      pages = pages + 1
      local fields = subtract(page[2])
      for first = 1, #fields, 1000 do
        redis.call('HDEL', key, unpack(fields, first, math.min(first + 999, #fields)))
      end
      subtracted = subtracted + #fields
      budget = budget - #fields
    until cursor == '0' or budget <= 0 or pages >= 8
    if cursor == '0' then
      redis.call('HDEL', KEYS[1], 'rcur')
    else
      redis.call('HSET', KEYS[1], 'rcur', s .. ' ' .. cursor)
      budget = 0  -- call again: the scan goes on from the kept cursor
    end
  end
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[3], s)
    dropped = dropped + 1
    if kept_cursor(s) then
      redis.call('HDEL', KEYS[1], 'rcur')
    end
  end
end
return {dropped, subtracted, budget <= 0 and 1 or 0}
