-- Library: prepended by store/scripts.py to every script that calls day_open (site_day,
-- event_day, goal_day: one rule for when a day closes). A day's table is open (it takes the day's
-- visitors) until its HASH's field open_until, fixed by the day's first write: the later of the
-- day-based instant (the day's end plus COUNTERS_DAY_GRACE_DAYS, from the day) and "kept" seconds
-- after that write (a back-filled day stays open that long), however old the day.
-- day_open(key, from_day, kept, counted_before): key = the day's HASH, from_day = the day-based
-- instant (epoch s), kept = seconds, counted_before = a HASH that exists without open_until was
-- written before the field existed, so its visitors are gone: closed (site_day's and event_day's
-- tables; a goal's day was never written without it). Returns now (the server's TIME, seconds),
-- open_until and whether the day is open now.
local function day_open(key, from_day, kept, counted_before)
  local now = tonumber(redis.call('TIME')[1])
  local open_until = tonumber(redis.call('HGET', key, 'open_until'))
  if not open_until then
    if counted_before and redis.call('EXISTS', key) == 1 then
      open_until = 0
    else
      open_until = math.max(tonumber(from_day), now + tonumber(kept))
      redis.call('HSET', key, 'open_until', open_until)
    end
  end
  return now, open_until, open_until > now
end

