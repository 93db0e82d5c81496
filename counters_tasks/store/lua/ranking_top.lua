-- Read one board's ranking for the window of a given slot, without writing anything.
-- KEYS: the board's meta HASH, top ZSET, slot index ZSET.
-- ARGV: slot hash name head, tail, now_slot, offset, limit, period_hours, interval_hours, and the
--       most members of expired slots to correct for (-1: no limit).
-- The top ZSET holds the live slots; slots of the index outside (now_slot - n, now_slot] (expired
-- but not rotated yet, or ahead of now) are read and their members returned with corrected totals,
-- for the caller to merge (string order is left to the caller: Lua's depends on the locale).
-- Returns {1, top page [member, score...]} when nothing needs correcting,
--         {2, the first offset+limit+k of top [member, score...], {member, total...} of the k
--             corrected members}, {0} when the board does not exist, -1 other settings,
--         -2 an indexed slot hash is missing (expired by its safety-net TTL: rebuild),
--         {3} the slots out of the window (expired, or ahead of now) hold more members than the
--             limit (the caller rotates first, or reads in parts),
--         -5 the board is being rebuilt or deleted (the caller finishes that first).
local meta = redis.call('HMGET', KEYS[1], 'period', 'interval', 'rb', 'del')
if meta[3] or meta[4] then
  return -5
end
if not meta[1] then
  return {0}
end
if meta[1] ~= ARGV[6] or meta[2] ~= ARGV[7] then
  return -1
end
local n = tonumber(ARGV[6]) / tonumber(ARGV[7])
local now_slot = tonumber(ARGV[3])
local offset, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
local outside = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now_slot - n + 1))
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now_slot, '+inf')) do
  outside[#outside + 1] = s
end
local most = tonumber(ARGV[8])
if most >= 0 and #outside > 0 then
  local members = 0
  for _, s in ipairs(outside) do
    members = members + redis.call('HLEN', ARGV[1] .. s .. ARGV[2])
  end
  if members > most then
    return {3}
  end
end
if #outside == 0 then  -- by rank: O(log N + limit) however deep the page; totals <= 0 sort last
  local page = redis.call('ZRANGE', KEYS[2], offset, offset + limit - 1, 'WITHSCORES')
  local positive = {}
  for i = 1, #page, 2 do
    if tonumber(page[i + 1]) >= 0 then
      break
    end
    positive[#positive + 1] = page[i]
    positive[#positive + 1] = page[i + 1]
  end
  return {1, positive}
end
local adjust, members = {}, {}
for _, s in ipairs(outside) do
  local kv = redis.call('HGETALL', ARGV[1] .. s .. ARGV[2])
  if #kv == 0 then
    return -2
  end
  for i = 1, #kv, 2 do
    local m = kv[i]
    if not adjust[m] then
      adjust[m] = 0
      members[#members + 1] = m
    end
    adjust[m] = adjust[m] + tonumber(kv[i + 1])
  end
end
local corrected = {}
for _, m in ipairs(members) do
  local total = -(tonumber(redis.call('ZSCORE', KEYS[2], m)) or 0) - adjust[m]
  corrected[#corrected + 1] = m
  corrected[#corrected + 1] = total
end
local head = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(0', 'WITHSCORES', 'LIMIT', 0, offset + limit + #members)
return {2, head, corrected}
