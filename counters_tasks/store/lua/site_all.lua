-- Count page views and unique visitors of sites, all time, in one shard (by visitor id): the
-- shard's slot is the same for every site, so one call serves every site of a batch.
-- KEYS: per site, the shard's totals HASH (pv, uv) and visitors SET (HLL in hll mode), then
--       (when ARGV[1] > 0) the message's dedupe marker.
-- ARGV: marker TTL in seconds (0 = no dedupe), mode ('exact' or 'hll'), then per site (in the
--       order of KEYS): n, then n visitor ids (one per view; an id may repeat).
-- Every key's type is checked before the first write (wrong_type).
-- Returns 0, or -1 when this message was already applied here.
local ttl = tonumber(ARGV[1])
local hll = ARGV[2] == 'hll'
local sites = math.floor(#KEYS / 2)
local marker = KEYS[2 * sites + 1]
local checks = {}
for s = 1, sites do
  checks[#checks + 1] = KEYS[2 * s - 1]
  checks[#checks + 1] = 'hash'
  checks[#checks + 1] = KEYS[2 * s]
  checks[#checks + 1] = hll and 'string' or 'set'
end
local refused = wrong_type(checks)
if refused then
  return refused
end
local go, marker_refused = dedupe_marker_claim(marker, ttl)  -- (the marker's type checked there)
if not go then
  return marker_refused or -1
end
local at = 3
for s = 1, sites do
  local totals, visitors = KEYS[2 * s - 1], KEYS[2 * s]
  local n = tonumber(ARGV[at])
  local first, last = at + 1, at + n
  at = last + 1
  redis.call('HINCRBY', totals, 'pv', n)
  if hll then
    for from = first, last, 1000 do
      redis.call('PFADD', visitors, unpack(ARGV, from, math.min(from + 999, last)))
    end
    redis.call('HSET', totals, 'uv', redis.call('PFCOUNT', visitors))
  else
    local new = 0
    for from = first, last, 1000 do  -- SADD counts each new member once, repeated or not
      new = new + redis.call('SADD', visitors, unpack(ARGV, from, math.min(from + 999, last)))
    end
    if new > 0 then
      redis.call('HINCRBY', totals, 'uv', new)
    end
  end
end
return 0
