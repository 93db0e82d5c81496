-- Fix a day's expected-uniques figure once: the first writer wins, later writers get its value.
-- KEYS: the day's expected figure. ARGV: the caller's figure, expire-at (epoch s).
-- Returns the fixed figure.
local fixed = redis.call('GET', KEYS[1])
if fixed then
  return fixed
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('EXPIREAT', KEYS[1], ARGV[2])
return ARGV[1]
