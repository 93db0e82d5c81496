-- Count page views and unique visitors of paths of one tag group, all time.
-- KEYS: per path, its HASH (fields pv, uv, and in exact mode one field per visitor id seen:
--       a small hash stays a compact listpack), in hll mode followed by its visitors HLL; then
--       (when ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), kept (seconds after
--       the latest view the path's keys live, 0 = for ever), k, then per path: n, then n
--       visitor ids (one per view; an id may repeat).
-- Every key's type is checked before the first write (wrong_type).
-- Returns 0, or -1 when this message was already applied here.
local ttl = tonumber(ARGV[1])
local types = {}
for k = 1, #KEYS do  -- path hashes (each followed by its HLL in hll mode), then the marker
  local kind = 'hash'
  if ttl > 0 and k == #KEYS then
    kind = 'string'
  elseif ARGV[2] == 'hll' and k % 2 == 0 then
    kind = 'string'
  end
  types[#types + 1] = KEYS[k]
  types[#types + 1] = kind
end
local refused = wrong_type(types)
if refused then
  return refused
end
if ttl > 0 then
  if not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'EX', ttl) then
    return -1
  end
end
local hll = ARGV[2] == 'hll'
local kept = tonumber(ARGV[3])
local per = hll and 2 or 1
local i = 5
for p = 1, tonumber(ARGV[4]) do
  local totals = KEYS[(p - 1) * per + 1]
  local n = tonumber(ARGV[i])
  local first, last = i + 1, i + n
  redis.call('HINCRBY', totals, 'pv', n)
  if hll then
    local visitors = KEYS[(p - 1) * per + 2]
    for from = first, last, 1000 do
      redis.call('PFADD', visitors, unpack(ARGV, from, math.min(from + 999, last)))
    end
    redis.call('HSET', totals, 'uv', redis.call('PFCOUNT', visitors))
    if kept > 0 then
      redis.call('EXPIRE', visitors, kept)
    end
  else
    local new = 0
    for a = first, last do
      new = new + redis.call('HSETNX', totals, ARGV[a], '')
    end
    if new > 0 then
      redis.call('HINCRBY', totals, 'uv', new)
    end
  end
  if kept > 0 then
    redis.call('EXPIRE', totals, kept)
  end
  i = last + 1
end
return 0
