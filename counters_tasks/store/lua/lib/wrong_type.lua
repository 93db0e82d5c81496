-- Library: prepended by store/scripts.py to every script that calls wrong_type (scripts
-- cannot load one another). A write script calls it before its first write, so a key of
-- another type (changed by hand, or by another program) fails the call with nothing written
-- and no dedupe marker: the message is retried or set aside, never half-applied.
-- wrong_type(list): list = {key, type, key, type, ...} (types as TYPE names them: 'string'
-- for a HyperLogLog too). Returns an error reply naming the first key of another type than
-- its own (absent keys are fine), else nil.
-- wrong_type_of_each(head, names, tail, kind): the same for the keys head .. name .. tail of
-- every name (a board's slot hashes), all of one type.
-- wrong_type_read(kind, command, key, ...): a read command on a key that should be of type kind
-- (a type check that costs nothing when the key is right): its reply, or nil and the error
-- reply wrong_type gives (or the command's own error) when it failed.
local function wrong_type(list)
  for n = 1, #list, 2 do
    local found = redis.call('TYPE', list[n])['ok']
    if found ~= 'none' and found ~= list[n + 1] then
      return redis.error_reply('WRONGTYPE ' .. list[n] .. ' holds a ' .. found .. ', not a ' .. list[n + 1] ..
                               ' (changed by hand?): nothing was written')
    end
  end
  return nil
end


local function wrong_type_of_each(head, names, tail, kind)
  local list = {}
  for _, name in ipairs(names) do
    list[#list + 1] = head .. name .. tail
    list[#list + 1] = kind
  end
  return wrong_type(list)
end


local function wrong_type_read(kind, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply['err'] then
    return nil, wrong_type({key, kind}) or redis.error_reply(reply['err'])
  end
  return reply, nil
end
