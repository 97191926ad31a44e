-- Whether registering ARGV[1] with verify repeats the webhook's verification in progress
-- (_lib.lua repeats_verification): the API then answers the webhook as it is, and counts no
-- verification against the rate limits. Reads only.
-- KEYS: 1 webhook
-- ARGV: 1 url, 2 the shard's key prefix (the challenge's delivery), 3 the event types asked
--       for (space-separated; '' for the operational webhook: batch.completed's default)
-- Returns: the webhook's hash (HGETALL's field, value list) when it repeats; else an empty list.
if repeats_verification(KEYS[1], ARGV[2], ARGV[1], ARGV[3]) then
  return redis.call('HGETALL', KEYS[1])
end
return {}
