-- One bounded step of deleting a board.
-- KEYS: the board's meta HASH, top ZSET, slot index ZSET, rebuild ZSET, rebuild SET.
-- ARGV: slot hash name head, tail, the most slot hashes to delete in this call.
-- The first step marks the board (meta.del): every other ranking script then returns -5 and its
-- caller finishes the deletion first, so no write or read sees half a board. Slot hashes go by
-- UNLINK (freed in the background however big), the index with them; the last step unlinks the
-- rest. A write after the deletion starts a new board.
-- Returns 1 when the board is gone (or never existed), 0 when more steps are needed.
local meta, top, index = KEYS[1], KEYS[2], KEYS[3]
-- The keys read and written are type-checked before the first write (wrong_type), so a key
-- changed by hand never leaves the board marked as being deleted.
local refused = wrong_type({meta, 'hash', top, 'zset', index, 'zset'})
if refused then
  return refused
end
if redis.call('EXISTS', meta, top, index) == 0 then
  return 1
end
redis.call('HSET', meta, 'del', 1)
local slots = redis.call('ZRANGE', index, 0, tonumber(ARGV[3]) - 1)
for _, s in ipairs(slots) do
  redis.call('UNLINK', ARGV[1] .. s .. ARGV[2])
  redis.call('ZREM', index, s)
end
if redis.call('ZCARD', index) > 0 then
  return 0
end
redis.call('UNLINK', top, index, KEYS[4], KEYS[5], meta)
return 1
