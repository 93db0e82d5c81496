-- One bounded step of recomputing a board's top ZSET from its live slot hashes (recovery).
-- KEYS: the board's meta HASH, top ZSET, slot index ZSET, the new top ZSET being built, the SET
--       of members already computed.
-- ARGV: slot hash name head, tail, budget (slot reads in this call at most).
-- The first step marks the board as rebuilding (meta.rb = the slot being scanned, meta.rbc =
-- its HSCAN cursor): every other ranking script then returns -5 and its caller finishes the
-- rebuild first, so no write lands in between. Each member met while scanning the slots is
-- computed once, whole (its amount in every indexed slot), into the new ZSET; the last step
-- swaps it in, drops index entries whose hash is gone (expired by the safety-net TTL: their
-- data had left the window days before) and clears the marks.
-- Returns {1, members listed} when done, {0, 0} when more steps are needed.
local meta, top, index, fresh, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local head, tail, budget = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- Every key's type, the slot hashes' included, is checked before the first write (wrong_type).
local refused = wrong_type({meta, 'hash', top, 'zset', index, 'zset', fresh, 'zset', done, 'set'})
if refused then
  return refused
end
local slots = redis.call('ZRANGE', index, 0, -1)
refused = wrong_type_of_each(head, slots, tail, 'hash')
if refused then
  return refused
end
local slot, cursor = redis.call('HGET', meta, 'rb'), redis.call('HGET', meta, 'rbc')
if not slot then
  redis.call('UNLINK', fresh, done)
  slot, cursor = slots[1], '0'
end

local function finish()
  redis.call('UNLINK', top, done)  -- freed in the background, however big (RENAME would free top here)
  if redis.call('EXISTS', fresh) == 1 then
    redis.call('RENAME', fresh, top)
  end
  for _, s in ipairs(slots) do
    if redis.call('EXISTS', head .. s .. tail) == 0 then
      redis.call('ZREM', index, s)
    end
  end
  if redis.call('EXISTS', meta) == 1 then
    redis.call('HDEL', meta, 'rb', 'rbc')
    redis.call('HINCRBY', meta, 'rebuilds', 1)
  end
  return {1, redis.call('ZCARD', top)}
end

if not slot then
  return finish()
end
local cost = math.max(1, #slots)
-- a page asks for as many members as the budget pays for whole (each new one costs a read of
-- every slot), so a step stays near its budget however many slots the board has
local count = math.max(1, math.floor(budget / cost))
while budget > 0 do
  local page = redis.call('HSCAN', head .. slot .. tail, cursor, 'COUNT', count)
  for i = 1, #page[2], 2 do
    local member = page[2][i]
    if redis.call('SADD', done, member) == 1 then
      local total = 0
      for _, s in ipairs(slots) do
        total = total + tonumber(redis.call('HGET', head .. s .. tail, member) or '0')
      end
      if total ~= 0 then
        redis.call('ZADD', fresh, -total, member)
      end
      budget = budget - cost
    else
      budget = budget - 1
    end
  end
  cursor = page[1]
  if cursor == '0' then
    slot = redis.call('ZRANGEBYSCORE', index, '(' .. slot, '+inf', 'LIMIT', 0, 1)[1]
    if not slot then
      return finish()
    end
  end
end
redis.call('HSET', meta, 'rb', slot, 'rbc', cursor)
return {0, 0}
