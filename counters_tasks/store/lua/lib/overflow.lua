-- Library: prepended by store/scripts.py to every script that calls overflow. HINCRBY fails
-- ("increment or decrement would overflow") when a field would leave the 64-bit range; met
-- midway, that failure left the call's earlier writes and its dedupe marker. A write script
-- calls overflow before its first write, so such a call fails whole, naming the field.
-- overflow(key, sums): sums = {field = the total the call adds to it} (each amount is within
-- +-(2**53 - 1), so a call's sums stay exact enough for this bound). Returns an error reply
-- naming the first field whose value would pass +-9.2e18 (just inside 2**63), else nil.
local function overflow(key, sums)
  local fields, adds = {}, {}
  for field, sum in pairs(sums) do
    fields[#fields + 1] = field
    adds[#adds + 1] = sum
  end
  for first = 1, #fields, 1000 do
    local last = math.min(first + 999, #fields)
    local held = redis.call('HMGET', key, unpack(fields, first, last))
    for n = first, last do
      local total = (tonumber(held[n - first + 1]) or 0) + adds[n]
      if total >= 9.2e18 or total <= -9.2e18 then
        return redis.error_reply('ERR ' .. key .. ' field ' .. fields[n] .. ' would pass 9.2e18 (HINCRBY overflow)' ..
                                 ': nothing was written')
      end
    end
  end
  return nil
end
