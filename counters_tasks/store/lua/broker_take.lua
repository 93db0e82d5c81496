-- Take one message for a worker: pop it and record it as unacknowledged in the same step, so a
-- worker killed at any moment leaves it in the broker (kombu's BRPOP takes it out of Redis
-- first and records it only after the reply was read: a SIGKILL in between lost it).
-- KEYS: kombu's unacked HASH, its unacked index ZSET, then the queue lists in priority order.
-- Returns {queue key, message} or false when every queue is empty.
-- The HASH value is what kombu's QoS.append writes: the JSON list [message, exchange,
-- routing_key], built around the message's own text (no re-encoding).
for i = 3, #KEYS do
  local item = redis.call('RPOP', KEYS[i])
  if item then
    local ok, message = pcall(cjson.decode, item)
    local props = ok and type(message) == 'table' and message['properties']
    local info = type(props) == 'table' and props['delivery_info']
    if type(info) == 'table' and type(props['delivery_tag']) == 'string' then
      local now = redis.call('TIME')
      redis.call('ZADD', KEYS[2], now[1] + now[2] / 1000000, props['delivery_tag'])
      redis.call('HSET', KEYS[1], props['delivery_tag'],
        '[' .. item .. ', ' .. cjson.encode(info['exchange']) .. ', ' .. cjson.encode(info['routing_key']) .. ']')
    end
    -- not a kombu message: handed over unrecorded, as kombu's BRPOP would (the worker rejects it)
    return {KEYS[i], item}
  end
end
return false
