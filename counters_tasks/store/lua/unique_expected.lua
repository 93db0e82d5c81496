-- Fix a day's expected-uniques figure once: the first writer wins, later writers get its value.
-- KEYS: the day's expected figure.
-- ARGV: the caller's figure, expire-at (epoch s, from the day), kept (s, from now): the key
--       lives until the later of the two, so an old day being back-filled keeps its figure.
-- Returns the fixed figure.
local fixed = redis.call('GET', KEYS[1])
if fixed then
  return fixed
end
local now = tonumber(redis.call('TIME')[1])
redis.call('SET', KEYS[1], ARGV[1], 'EXAT', math.max(tonumber(ARGV[2]), now + tonumber(ARGV[3])))
return ARGV[1]
