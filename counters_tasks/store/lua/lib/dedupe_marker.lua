-- Library: prepended by store/scripts.py to every script that calls dedupe_marker_claim (after
-- wrong_type, which it calls). A write script deduplicated per message sets the message's
-- marker first, so one command says whether the message was applied here (a TYPE only when it
-- was, or the key is not a marker), and takes it back when it refuses the call.
-- dedupe_marker_claim(marker, ttl): SET marker NX EX ttl (nothing when ttl <= 0: no dedupe).
-- Returns true when this call goes on; false, nil when the message was applied here before;
-- false and the error reply when the marker's key holds another type.
-- dedupe_marker_release(marker, ttl, reply): a refusal's way out: drops the marker (nothing else
-- was written) and returns reply.
local function dedupe_marker_claim(marker, ttl)
  if ttl <= 0 or redis.call('SET', marker, '1', 'NX', 'EX', ttl) then
    return true, nil
  end
  if redis.call('TYPE', marker)['ok'] == 'string' then
    return false, nil
  end
  return false, wrong_type({marker, 'string'})
end


local function dedupe_marker_release(marker, ttl, reply)
  if ttl > 0 then
    redis.call('DEL', marker)
  end
  return reply
end


