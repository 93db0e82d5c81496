-- Drop the samples that left the window from the counters of one tag group that have any due.
-- KEYS: the group's due summary ZSET (subset number -> the earliest due time in that subset),
--       the group's scan HASH (member -> '<HSCAN cursor> <earliest due time kept so far>' of
--       a big counter being cleaned a page at a time).
-- ARGV: now, the head of the group's counter hash names (the hash of a member is head ..
--       member), the head of its subset due ZSETs (head .. subset number; member = a counter's
--       escaped name, score = when its first sample leaves the window), the most counters to
--       take, the most fields to examine in this call, the samples kept per precision (120),
--       then the precisions in the order of the field's precision index (field = bucket_start /
--       precision * 10 + index). Every key built here carries the group's hash tag.
-- A sample (bucket b of precision p) leaves the window when now >= b + 120 p. A counter whose
-- fields fit the budget is cleaned whole and re-scored with its next due time, or leaves the
-- index when nothing is left; a bigger one (back-filled samples, or a busy counter: up to 840
-- live samples) is cleaned a page (HSCAN) at a time, its cursor and the earliest due time of
-- the samples kept so far stored between calls, its score kept (still due) until the scan is
-- done and then set to that earliest time, so no call runs long, each field is examined once a
-- scan, and a counter is scanned again only when a sample of it is due. A subset's summary score
-- is set again to its earliest member's once its due members are done.
-- The group's keys are type-checked before the first write, each due subset and counter hash
-- before it is touched (wrong_type): a key changed by hand fails the call naming it; what was
-- cleaned before it stays cleaned (each counter's step is whole, and cleaning is idempotent).
-- Returns {samples removed, 1 when more is due in this group (call again), else 0}.
local summary, now, head, due_head = KEYS[1], tonumber(ARGV[1]), ARGV[2], ARGV[3]
local max_counters, budget, keep = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local precisions = {}
for a = 7, #ARGV do
  precisions[#precisions + 1] = tonumber(ARGV[a])
end

local function clean(key, fields)
  local old, next_due = {}, nil
  for _, field in ipairs(fields) do
    local n = tonumber(field)
    local index = n % 10
    local precision = precisions[index + 1]
    local until_at = (n - index) / 10 * precision + keep * precision
    if until_at <= now then
      old[#old + 1] = field
    elseif not next_due or until_at < next_due then
      next_due = until_at
    end
  end
  for first = 1, #old, 1000 do
    redis.call('HDEL', key, unpack(old, first, math.min(first + 999, #old)))
  end
  return #old, next_due
end

-- (an idle group costs its one ZRANGEBYSCORE and nothing more: the checks follow what is due)
local due_subsets = redis.pcall('ZRANGEBYSCORE', summary, '-inf', now)
if due_subsets['err'] then
  return wrong_type({summary, 'zset'}) or due_subsets
end
local refused = #due_subsets > 0 and wrong_type({KEYS[2], 'hash'})
if refused then
  return refused
end
local removed, more, taken = 0, 0, 0
for _, subset in ipairs(due_subsets) do
  if budget <= 0 or taken >= max_counters then
    more = 1
    break
  end
  local due_key = due_head .. subset
  refused = wrong_type({due_key, 'zset'})
  if refused then
    return refused
  end
  local names = redis.call('ZRANGEBYSCORE', due_key, '-inf', now, 'LIMIT', 0, max_counters - taken)
  for _, member in ipairs(names) do
    if budget <= 0 then
      more = 1
      break
    end
    taken = taken + 1
    local key = head .. member
    refused = wrong_type({key, 'hash'})
    if refused then
      return refused
    end
    local size = redis.call('HLEN', key)
    if size == 0 then
      redis.call('ZREM', due_key, member)
    elseif size <= budget then
      local gone, next_due = clean(key, redis.call('HKEYS', key))
      removed = removed + gone
      budget = budget - size
      if next_due then
        redis.call('ZADD', due_key, 'XX', next_due, member)
      else
        redis.call('ZREM', due_key, member)
      end
    else
      -- the scan's cursor and the earliest due time of the samples it kept so far ('<cursor> <due>')
      local kept = redis.call('HGET', KEYS[2], member) or '0'
      local cursor, earliest = string.match(kept, '^(%S+) ?(%S*)$')
      earliest = tonumber(earliest)
      local page = redis.call('HSCAN', key, cursor, 'COUNT', budget)
      local fields = {}
      for f = 1, #page[2], 2 do
        fields[#fields + 1] = page[2][f]
      end
      local gone, next_due = clean(key, fields)
      removed = removed + gone
      if next_due and (not earliest or next_due < earliest) then
        earliest = next_due
      end
      if page[1] ~= '0' then
        redis.call('HSET', KEYS[2], member, page[1] .. ' ' .. (earliest and string.format('%.0f', earliest) or ''))
        more = 1
      else
        -- the scan is done: the counter's next due time is its earliest kept sample's (a counter
        -- left due would be scanned again by every call, forever, when it keeps more live
        -- samples than a call examines: up to 840, 120 at each precision)
        redis.call('HDEL', KEYS[2], member)
        if earliest then
          redis.call('ZADD', due_key, 'XX', earliest, member)
        else
          redis.call('ZREM', due_key, member)
        end
      end
      budget = 0
    end
  end
  local first = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', summary, subset)
  else
    redis.call('ZADD', summary, first[2], subset)
  end
end
if taken >= max_counters then
  more = 1
end
return {removed, more}
