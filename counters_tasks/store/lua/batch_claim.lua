-- Claim per-item messages for a worker batch and journal those claimed, in one step.
-- KEYS: the batch's journal STRING, then per message its claim STRING; one hash tag (the claim
--       group the message ids hash into).
-- ARGV: TTL in seconds, the batch id, then per message (KEYS order) its entry as JSON text.
-- A message not claimed yet is claimed for this batch (its claim holds the batch id); one
-- already claimed is left to the batch named. The journal gets the JSON array of the entries
-- claimed here, in order, so it always holds exactly what its claims say (written together: a
-- reader never sees one without the other). Every claim is read before the first write, so a
-- key of another type fails the call with nothing written.
-- Returns the batch each message is claimed by before this call, in KEYS order ('' = claimed
-- now).
local ttl, batch = tonumber(ARGV[1]), ARGV[2]
local owners, claimed = {}, {}
for i = 2, #KEYS do
  local owner, refused = wrong_type_read('string', 'GET', KEYS[i])
  if refused then
    return refused
  end
  owners[i - 1] = owner or ''
end
for i = 2, #KEYS do
  if owners[i - 1] == '' then
    redis.call('SET', KEYS[i], batch, 'EX', ttl)
    claimed[#claimed + 1] = ARGV[i + 1]
  end
end
if #claimed > 0 then
  redis.call('SET', KEYS[1], '[' .. table.concat(claimed, ',') .. ']', 'EX', ttl)
end
return owners
