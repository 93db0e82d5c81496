-- Mark session ids as seen on one day: SADD to the day's sets, INCR the day's count by the
-- number of new ids, at most once per message.
-- KEYS: the day's expected figure, the day's count, the day's open marker, the day's legacy
--       overflow HASH, the day's levels HASH, m shard SETs, then (when ARGV[1] > 0) the
--       message's dedupe marker.
-- ARGV: marker TTL (0 = no dedupe), the expected figure the caller sharded by, shards
--       expire-at (epoch s, from the day), shards kept (s, from now), count expire-at (from the
--       day), count kept (s, from now), m, then per shard: its number, n, then n integer ids.
-- No set ever holds more than 512 ids (so each stays an intset). A shard that is full continues
-- in levels: level l (1, 2, ...) of shard n has 16^l sets `<shard key>:L<l>:<r mod 16^l>`, r
-- being 28 bits of the SHA-1 of the id. An id goes to the first level whose set for it has room;
-- sets never shrink, so a lookup stops at the first set that holds the id or has room. A call
-- goes a level at a time with one SMISMEMBER and one SCARD per set its ids fall in: a few
-- levels (log16 of ids / 512 per shard) however far a day outgrows its figure (the chain of
-- overflow sets this replaced checked every id against every set: 18-23 ms calls at 100,000
-- ids on one shard).
-- The levels HASH keeps each shard's deepest level (for readers). The legacy HASH (shard ->
-- k) lists the overflow chain `<shard key>:<k>` a day written by 0.1 may have: still checked,
-- never extended.
-- Everything that can fail is read before the first write (the dedupe marker included): a
-- key of another type gives an error and leaves nothing written, so a retry applies it whole
-- (the day's keys by wrong_type; a shard's sets by their SMISMEMBER, wrong_type_read, which names
-- the key the same way). The shards' legacy and levels entries are read with one HMGET each,
-- and a set gets its EXPIREAT when this call creates it or opens the day (a set of an open day
-- already expires when the day's marker says).
-- A day is open while its open marker lives. The first write of a day that was never counted
-- (no count), however old, opens it: history can be back-filled. It fixes the moment the
-- day's shards go, the later of their day-based expiry and "kept" seconds from now (retention
-- runs from when data is written), and stores it in the marker, which expires then too, so
-- every set of the day, whenever written, goes at that same moment. A day with a count but
-- no open marker had its shards expire: it is closed, since its ids can no longer be
-- deduplicated (nothing is written). The count and figure are kept until the later of their
-- day-based expiry and "kept" seconds from the latest write.
-- Returns the number of new ids; -1 when the day's figure is missing or not the caller's (the
-- caller fixes or re-reads it and sends again; nothing was written); -2 when the day is closed
-- (nothing written); 0 when already applied.
local SHARD_MAX = 512
local FANOUT = 16
local MAX_LEVEL = 7  -- 16^7 sets: the 28 bits of the route
local nshards = tonumber(ARGV[7])
local ttl = tonumber(ARGV[1])
local marker = KEYS[6 + nshards]

local expected_types = {KEYS[1], 'string', KEYS[2], 'string', KEYS[3], 'string', KEYS[4], 'hash', KEYS[5], 'hash'}
if ttl > 0 then
  expected_types[#expected_types + 1] = marker
  expected_types[#expected_types + 1] = 'string'
end
local refused = wrong_type(expected_types)
if refused then
  return refused
end

local fixed = redis.call('GET', KEYS[1])
if fixed ~= ARGV[2] then
  return -1
end
local now = tonumber(redis.call('TIME')[1])
local shards_at = tonumber(redis.call('GET', KEYS[3]))
local opening = not shards_at
if not shards_at then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return -2
  end
  shards_at = math.max(tonumber(ARGV[3]), now + tonumber(ARGV[4]))
end
local count_at = math.max(tonumber(ARGV[5]), now + tonumber(ARGV[6]))
if ttl > 0 and redis.call('EXISTS', marker) == 1 then
  return 0
end

-- reads: where each new id goes, a level at a time, one SMISMEMBER and one SCARD a set (SISMEMBER
-- on a key of another type raises before any write)
local adds = {}  -- set key -> ids to add
local created = {}  -- set key -> true when it holds nothing yet
local deepest = {}  -- shard number -> deepest level this call adds to
local new = 0
local numbers = {}
local i = 8
for j = 1, nshards do
  numbers[j] = ARGV[i]
  i = i + 2 + tonumber(ARGV[i + 1])
end
local legacies = nshards > 0 and redis.call('HMGET', KEYS[4], unpack(numbers)) or {}
local depths = nshards > 0 and redis.call('HMGET', KEYS[5], unpack(numbers)) or {}
-- one set's share of a shard's pending ids: those it holds are done, the new ones it has room
-- for are added to it, the rest go one level deeper (appended to `deeper`); an error reply
-- when the key holds another type
local function take(key, ids, shard, level, depth, deeper)
  local found, refused_set = wrong_type_read('set', 'SMISMEMBER', key, unpack(ids))
  if refused_set then
    return refused_set
  end
  local room = SHARD_MAX - redis.call('SCARD', key)
  created[key] = room == SHARD_MAX
  for p = 1, #ids do
    if found[p] == 0 then
      if room > 0 then
        room = room - 1
        local list = adds[key]
        if not list then
          list = {}
          adds[key] = list
        end
        list[#list + 1] = ids[p]
        new = new + 1
        if level > depth and level > (deepest[shard] or 0) then
          deepest[shard] = level
        end
      else
        deeper[#deeper + 1] = ids[p]
      end
    end
  end
  return nil
end

i = 8
for j = 1, nshards do
  local base, shard, n = KEYS[5 + j], ARGV[i], tonumber(ARGV[i + 1])
  local legacy = tonumber(legacies[j] or '0')
  local depth = tonumber(depths[j] or '0')
  local pending
  if n == 1 then  -- the common case on a day of many shards: no table to find repeats
    pending = {ARGV[i + 2]}
  else
    local in_call = {}
    pending = {}
    for a = i + 2, i + 1 + n do
      if not in_call[ARGV[a]] then
        in_call[ARGV[a]] = true
        pending[#pending + 1] = ARGV[a]
      end
    end
  end
  for k = 1, legacy do  -- a day of 0.1's layout: its overflow chain
    if #pending == 0 then
      break
    end
    local found, refused_set = wrong_type_read('set', 'SMISMEMBER', base .. ':' .. k, unpack(pending))
    if refused_set then
      return refused_set
    end
    local left = {}
    for p = 1, #pending do
      if found[p] == 0 then
        left[#left + 1] = pending[p]
      end
    end
    pending = left
  end
  if #pending > 0 then  -- level 0: the shard's own set, every pending id at once
    local deeper = {}
    local refused_set = take(base, pending, shard, 0, depth, deeper)
    if refused_set then
      return refused_set
    end
    pending = deeper
  end
  local level, routes = 1, nil
  while #pending > 0 do
    if level > MAX_LEVEL then
      return redis.error_reply('ERR uniques: shard ' .. base .. ' is past its last level')
    end
    routes = routes or {}
    local by_set, order = {}, {}
    for _, id in ipairs(pending) do
      local route = routes[id]
      if not route then
        route = tonumber(string.sub(redis.sha1hex(id), 1, 7), 16)
        routes[id] = route
      end
      local key = base .. ':L' .. level .. ':' .. (route % (FANOUT ^ level))
      if not by_set[key] then
        by_set[key] = {}
        order[#order + 1] = key
      end
      table.insert(by_set[key], id)
    end
    local deeper = {}
    for _, key in ipairs(order) do
      local refused_set = take(key, by_set[key], shard, level, depth, deeper)
      if refused_set then
        return refused_set
      end
    end
    pending = deeper
    level = level + 1
  end
  i = i + 2 + n
end

-- writes
if ttl > 0 then
  redis.call('SET', marker, '1', 'EX', ttl)
end
for key, list in pairs(adds) do
  redis.call('SADD', key, unpack(list))
  if opening or created[key] then
    redis.call('EXPIREAT', key, shards_at)
  end
end
for shard, level in pairs(deepest) do
  redis.call('HSET', KEYS[5], shard, level)
end
redis.call('SET', KEYS[3], shards_at, 'EXAT', shards_at)
for k = 4, 5 do
  if redis.call('EXISTS', KEYS[k]) == 1 then
    redis.call('EXPIREAT', KEYS[k], shards_at)
  end
end
if new > 0 then
  redis.call('INCRBY', KEYS[2], new)
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('EXPIREAT', KEYS[2], count_at)
end
if redis.call('TTL', KEYS[1]) >= 0 then
  redis.call('EXPIREAT', KEYS[1], count_at)
end
return new
