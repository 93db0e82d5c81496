-- Forget one visitor from one funnel's day (events/erase.py, worker.forget): what the day credits
-- the visitor with (res:<D>'s field <visitor>: "<furthest step>|<t0 us>|<bucket of step 2>,...")
-- taken out of the day's figures, as funnel_step.lua's credit() would take it back: SREM from the
-- step sets it reached and HINCRBY -1 of the histogram buckets it names; then its res:<D> fields
-- (<visitor> and <visitor>!) HDEL'd, and (when given) its state DEL'd. Every key in the funnel's
-- hash tag.
-- KEYS: res:<D> (HASH), day:<D> (HASH), step:<D>:1 .. step:<D>:n (SETs), then (optional) the
--       visitor's state v:<visitor> (HASH).
-- ARGV: the visitor id, n (the funnel's steps).
-- Returns {entries removed (set members, res fields, the state), figures corrected (buckets)}.
local res, day_key = KEYS[1], KEYS[2]
local v, n = ARGV[1], tonumber(ARGV[2])
local removed, corrected = 0, 0
local record = redis.call('HGET', res, v)
if record then
  local f, _t0, rest = string.match(record, '^(%d+)|(%-?%d+)|(.*)$')
  f = tonumber(f) or 0
  local k = 2
  for bucket in string.gmatch(rest or '', '[^,]+') do
    if k <= f then
      local field = 'h' .. k .. ':' .. bucket
      if tonumber(redis.call('HGET', day_key, field) or '0') > 0 then
        if redis.call('HINCRBY', day_key, field, -1) == 0 then
          redis.call('HDEL', day_key, field)
        end
        corrected = corrected + 1
      end
    end
    k = k + 1
  end
end
for k = 1, n do
  removed = removed + redis.call('SREM', KEYS[2 + k], v)
end
removed = removed + redis.call('HDEL', res, v, v .. '!')
if KEYS[3 + n] then
  removed = removed + redis.call('DEL', KEYS[3 + n])
end
return {removed, corrected}
