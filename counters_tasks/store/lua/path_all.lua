-- Count page views and unique visitors of paths of one tag group, all time.
-- KEYS: per path, its HASH (fields pv, uv, and in exact mode one field per visitor id seen:
--       a small hash stays a compact listpack), in hll mode followed by its visitors HLL; then
--       (when ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), kept (seconds after
--       the latest view the path's keys live, 0 = for ever), k, then per path: n, then n
--       visitor ids (one per view; an id may repeat).
-- The marker is set first (SET NX: one command says whether this message was applied here; a
-- TYPE only when it was or the key is not a marker) and taken back on a refusal.
-- In exact mode a path costs one HMGET (pv, uv and its visitors' fields: the type check and the
-- read) and one HSET (the new totals and visitor fields) however many views it has; every path
-- is read before the first write, so a hash of another type, or a total that is not an integer,
-- fails the call with nothing written (hash_total). In hll mode every key's type is checked before the first write (wrong_type), and a
-- failing HINCRBY (a pv past the 64-bit range) takes back the pv of the paths before it.
-- Returns 0, or -1 when this message was already applied here.
local ttl = tonumber(ARGV[1])
local hll = ARGV[2] == 'hll'
local per = hll and 2 or 1
local npaths = tonumber(ARGV[4])
local kept = tonumber(ARGV[3])
local marker = KEYS[#KEYS]
local claimed, refused_marker = dedupe_marker_claim(marker, ttl)
if not claimed then
  return refused_marker or -1
end

local function refuse(reply)  -- nothing but the marker written: take it back
  return dedupe_marker_release(marker, ttl, reply)
end

if not hll then
  local plans = {}  -- per path: {fields and values to set, {field, amount} to HINCRBY}
  local i = 5
  for p = 1, npaths do
    local totals = KEYS[p]
    local n = tonumber(ARGV[i])
    local fields, in_call = {'pv', 'uv'}, {}  -- then the call's visitors, each once
    for a = i + 1, i + n do
      if not in_call[ARGV[a]] then
        in_call[ARGV[a]] = true
        fields[#fields + 1] = ARGV[a]
      end
    end
    local held, failed = hash_total_read(totals, fields)
    if not held then
      return refuse(wrong_type({totals, 'hash'}) or redis.error_reply(failed['err']))
    end
    local sets, bigs = {}, {}
    for f = 3, #fields do
      if not held[f] then
        sets[#sets + 1] = fields[f]
        sets[#sets + 1] = ''
      end
    end
    for f, adding in ipairs({n, #sets / 2}) do
      local name = f == 1 and 'pv' or 'uv'
      local total, how = hash_total(totals, name, held[f], adding)
      if not total then
        return refuse(how)
      elseif how == 'add' then
        bigs[#bigs + 1] = {name, adding}
      elseif adding > 0 then
        sets[#sets + 1] = name
        sets[#sets + 1] = hash_total_text(total)
      end
    end
    plans[p] = {sets, bigs}
    i = i + n + 1
  end
  for p = 1, npaths do  -- writes: nothing below can fail (types and totals checked above)
    hash_total_send('HSET', KEYS[p], plans[p][1], 2000)
    for _, big in ipairs(plans[p][2]) do
      redis.call('HINCRBY', KEYS[p], big[1], big[2])
    end
    if kept > 0 then
      redis.call('EXPIRE', KEYS[p], kept)
    end
  end
  return 0
end

local types = {}
for p = 1, npaths do
  types[#types + 1] = KEYS[(p - 1) * per + 1]
  types[#types + 1] = 'hash'
  types[#types + 1] = KEYS[(p - 1) * per + 2]
  types[#types + 1] = 'string'
end
local refused = wrong_type(types)
if refused then
  return refuse(refused)
end

local added = {}  -- per path written: {hash, views}

local function undo_all(reply)  -- take back the views of every path written, and fail with reply
  for u = #added, 1, -1 do
    if redis.call('HINCRBY', added[u][1], 'pv', -added[u][2]) == 0 then
      redis.call('HDEL', added[u][1], 'pv')  -- pv is never 0 once written: the field is new
    end
  end
  return refuse(reply)
end

local i = 5
for p = 1, npaths do
  local totals, visitors = KEYS[(p - 1) * per + 1], KEYS[(p - 1) * per + 2]
  local n = tonumber(ARGV[i])
  local first, last = i + 1, i + n
  local views = redis.pcall('HINCRBY', totals, 'pv', n)
  if type(views) == 'table' and views['err'] then
    return undo_all(redis.error_reply('ERR ' .. totals .. ' pv: ' .. views['err'] .. ': nothing was written'))
  end
  for from = first, last, 1000 do
    redis.call('PFADD', visitors, unpack(ARGV, from, math.min(from + 999, last)))
  end
  redis.call('HSET', totals, 'uv', redis.call('PFCOUNT', visitors))
  if kept > 0 then
    redis.call('EXPIRE', visitors, kept)
    redis.call('EXPIRE', totals, kept)
  end
  added[#added + 1] = {totals, n}  -- an HLL's additions need no taking back: a retry adds the same ids
  i = last + 1
end
return 0
