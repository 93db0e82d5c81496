-- Take one message for a worker: pop it and mark it unacknowledged in the same step, so a
-- worker killed at any moment leaves it in the broker (kombu's BRPOP takes it out of Redis
-- first and marks it only after the reply was read: a SIGKILL in between lost it).
-- KEYS: kombu's unacked HASH, its unacked index ZSET, the dead-letter LIST, the dead-letter
--       reasons HASH, then the queue lists in priority order.
-- ARGV: the largest message (bytes) decoded here, the most dead letters kept.
-- Returns {queue key, message}; {queue key, '', 'oversize'} when the message taken was larger
-- than ARGV[1] and was set aside unread (the caller takes again); false when every queue is empty.
-- The HASH value is what kombu's QoS.append writes: the JSON list [message, exchange,
-- routing_key], built around the message's own text (no re-encoding).
-- The keys written after a pop are type-checked before those writes (wrong_type): a key changed
-- by hand fails the call naming it, with the message pushed back where it was (a pop then an
-- error lost it). An empty poll costs no check.
for i = 5, #KEYS do
  local item = redis.call('RPOP', KEYS[i])
  if item then
    local refused = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'list', KEYS[4], 'hash'})
    if refused then
      redis.call('RPUSH', KEYS[i], item)
      return refused
    end
    local now = redis.call('TIME')
    if #item > tonumber(ARGV[1]) then
      -- never decoded: decoding costs Redis time in proportion to the size a client chose
      local letter = cjson.encode({reason = 'oversize', queue = KEYS[i], at = now[1] + now[2] / 1000000,
                                   size = #item, payload = string.sub(item, 1, 4096), truncated = true})
      redis.call('LPUSH', KEYS[3], letter)
      redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[2]) - 1)
      redis.call('HINCRBY', KEYS[4], 'oversize', 1)
      return {KEYS[i], '', 'oversize'}
    end
    local ok, message = pcall(cjson.decode, item)
    local props = ok and type(message) == 'table' and message['properties']
    local info = type(props) == 'table' and props['delivery_info']
    if type(info) == 'table' and type(props['delivery_tag']) == 'string' then
      redis.call('ZADD', KEYS[2], now[1] + now[2] / 1000000, props['delivery_tag'])
      redis.call('HSET', KEYS[1], props['delivery_tag'],
        '[' .. item .. ', ' .. cjson.encode(info['exchange']) .. ', ' .. cjson.encode(info['routing_key']) .. ']')
    end
    -- not a kombu message: handed over unrecorded; the worker sets it aside
    return {KEYS[i], item}
  end
end
return false
