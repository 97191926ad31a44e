-- Store signing material re-encrypted under the first key (`relay reencrypt`), field by
-- field, only where the field still holds the token that was re-encrypted: a rotation or a
-- first use in between wins, and the command counts the field as changed meanwhile.
-- KEYS: 1 signing
-- ARGV: field, token read, token re-encrypted (repeated for each field)
-- Returns: how many fields were replaced
local replaced = 0
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    replaced = replaced + 1
  end
end
return replaced
