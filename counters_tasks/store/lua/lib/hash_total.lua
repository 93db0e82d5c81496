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


-- hash_total_read(key, fields): HMGET key fields, 1,000 fields a command (Lua's unpack takes at
-- most ~8,000 values): the values in the order of fields (false when absent), or nil and the
-- error reply of the first command (a key of another type: nothing read). No fields: no command.
local function hash_total_read(key, fields)
  if #fields == 0 then
    return {}
  end
  local values = redis.pcall('HMGET', key, unpack(fields, 1, math.min(#fields, 1000)))
  if values['err'] then
    return nil, values
  end
  for first = 1001, #fields, 1000 do
    local last = math.min(first + 999, #fields)
    local more = redis.call('HMGET', key, unpack(fields, first, last))
    for f = first, last do
      values[f] = more[f - first + 1]
    end
  end
  return values
end


-- hash_total_send(command, key, list, step): command key <list>, step items a command (even for
-- HSET's field-value pairs), for lists of any length.
local function hash_total_send(command, key, list, step)
  for first = 1, #list, step do
    redis.call(command, key, unpack(list, first, math.min(first + step - 1, #list)))
  end
end
