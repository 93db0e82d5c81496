-- Count page views and unique visitors of paths of one tag group, all time.
-- KEYS: per path, its HASH (fields pv, uv, and in exact mode one field per visitor id seen:
--       a small hash stays a compact listpack), in hll mode followed by its visitors HLL; then
--       (when ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), kept (seconds after
--       the latest view the path's keys live, 0 = for ever), k, then per path: n, then n
--       visitor ids (one per view; an id may repeat).
-- The marker's TYPE says both whether this message was applied here and whether the marker is
-- a string. In exact mode a path's HASH is checked by its first write (HINCRBY pv): one of
-- another type fails the call whole, after the paths before it are taken back exactly (their
-- pv and uv less what this call added, the visitor fields it created removed), before the
-- marker. In hll mode every key's type is checked before the first write (wrong_type), and a
-- failing HINCRBY (a pv past the 64-bit range) takes back the pv of the paths before it.
-- Returns 0, or -1 when this message was already applied here.
local ttl = tonumber(ARGV[1])
local hll = ARGV[2] == 'hll'
local per = hll and 2 or 1
local npaths = tonumber(ARGV[4])
if ttl > 0 then
  local marker = KEYS[#KEYS]
  local found = redis.call('TYPE', marker)['ok']
  if found == 'string' then
    return -1
  elseif found ~= 'none' then
    return wrong_type({marker, 'string'})
  end
end
if hll then
  local types = {}
  for p = 1, npaths do
    types[#types + 1] = KEYS[(p - 1) * per + 1]
    types[#types + 1] = 'hash'
    types[#types + 1] = KEYS[(p - 1) * per + 2]
    types[#types + 1] = 'string'
  end
  local refused = wrong_type(types)
  if refused then
    return refused
  end
end

local added = {}  -- per path written: {hash, views, the visitor fields it created}

local function take_back(key, field, amount)
  if redis.call('HINCRBY', key, field, -amount) == 0 then
    redis.call('HDEL', key, field)  -- pv and uv are never 0 once written: the field is new
  end
end

local function undo_all(reply)  -- take back every path written, and fail with reply
  for u = #added, 1, -1 do
    local undo = added[u]
    take_back(undo[1], 'pv', undo[2])
    if #undo[3] > 0 then
      redis.call('HDEL', undo[1], unpack(undo[3]))
      take_back(undo[1], 'uv', #undo[3])
    end
  end
  return reply
end

local kept = tonumber(ARGV[3])
local i = 5
for p = 1, npaths do
  local totals = KEYS[(p - 1) * per + 1]
  local n = tonumber(ARGV[i])
  local first, last = i + 1, i + n
  local views = redis.pcall('HINCRBY', totals, 'pv', n)
  if type(views) == 'table' and views['err'] then
    return undo_all(wrong_type({totals, 'hash'}) or
      redis.error_reply('ERR ' .. totals .. ' pv: ' .. views['err'] .. ': nothing was written'))
  end
  if hll then
    local visitors = KEYS[(p - 1) * per + 2]
    for from = first, last, 1000 do
      redis.call('PFADD', visitors, unpack(ARGV, from, math.min(from + 999, last)))
    end
    redis.call('HSET', totals, 'uv', redis.call('PFCOUNT', visitors))
    if kept > 0 then
      redis.call('EXPIRE', visitors, kept)
    end
    added[#added + 1] = {totals, n, {}}  -- an HLL's additions need no taking back: a retry adds the same ids
  else
    local created = {}
    for a = first, last do
      if redis.call('HSETNX', totals, ARGV[a], '') == 1 then
        created[#created + 1] = ARGV[a]
      end
    end
    if #created > 0 then
      redis.call('HINCRBY', totals, 'uv', #created)
    end
    added[#added + 1] = {totals, n, created}
  end
  if kept > 0 then
    redis.call('EXPIRE', totals, kept)
  end
  i = last + 1
end
if ttl > 0 then
  redis.call('SET', KEYS[#KEYS], '1', 'EX', ttl)
end
return 0
