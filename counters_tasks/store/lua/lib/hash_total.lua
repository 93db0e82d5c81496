-- Library: prepended by store/scripts.py to every script that calls hash_total. Write scripts
-- add to hash fields by reading them (one HMGET for many fields) and writing the sums (one HSET,
-- one HDEL) rather than one HINCRBY a field: a command a key instead of a command a field. Lua's
-- numbers are doubles, exact for integers within 2**53; a sum past that is left to HINCRBY, and
-- what HINCRBY would refuse is refused here, before the script's first write.
-- hash_total(key, field, held, amount): held = the field's stored value (false when absent),
-- amount = a number within +-(2**53 - 1). Returns the new total and how to write it: 'set' (an
-- exact double: HSET hash_total_text(total), or HDEL when it is 0) or 'add' (past 2**53: HINCRBY
-- the amount; such a total is never 0); or nil and an error reply naming the key and field when
-- the stored value is not an integer (changed by hand) or the total would pass 9.2e18 (just
-- inside 2**63, HINCRBY's bound).
-- hash_total_text(total): a 'set' total as HSET takes it.
local HASH_TOTAL_EXACT = 2 ^ 53

local function hash_total(key, field, held, amount)
  local before = 0
  if held then
    before = tonumber(held)
    if not before or before % 1 ~= 0 then
      return nil, redis.error_reply('ERR ' .. key .. ' field ' .. field .. ' holds ' .. held ..
                                    ', not an integer (changed by hand?): nothing was written')
    end
  end
  local total = before + amount
  if math.abs(before) < HASH_TOTAL_EXACT and math.abs(total) < HASH_TOTAL_EXACT then
    return total, 'set'
  elseif total >= 9.2e18 or total <= -9.2e18 then
    return nil, redis.error_reply('ERR ' .. key .. ' field ' .. field ..
                                  ' would pass 9.2e18 (HINCRBY overflow): nothing was written')
  end
  return total, 'add'
end


local function hash_total_text(total)
  -- a small number goes to Redis as it is (%.17g: exact); formatting every one here costs more
  if total < 1e9 and total > -1e9 then
    return total
  end
  return string.format('%.0f', total)
end
