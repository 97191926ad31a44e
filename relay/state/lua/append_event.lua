-- Record one event in one of an account's feeds (relay.state.event_feed), once: the detector appends
-- every event it handles, and handles an outbox entry again after a crash.
-- KEYS: 1 the feed's log (stream), 2 its positions (hash: event id -> entry id),
--       3 the shard's event_logs (sorted set)
-- ARGV: 1 event id, 2 '<feed>:<account>' (event_logs member and published message),
--       3 the channel to publish on, 4 type, 5 batch name, 6 body (exact JSON bytes)
-- Returns: a JSON object (cjson): appended (1 now, 0 already there) and entry (its entry id).
local known = redis.call('HGET', KEYS[2], ARGV[1])
if known then
  return cjson.encode({appended = 0, entry = known})
end
local entry = redis.call('XADD', KEYS[1], '*', 'id', ARGV[1], 'type', ARGV[4],
                         'batch', ARGV[5], 'body', ARGV[6])
redis.call('HSET', KEYS[2], ARGV[1], entry)
local ms = string.match(entry, '^(%d+)')
redis.call('ZADD', KEYS[3], 'NX', ms, ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return cjson.encode({appended = 1, entry = entry})
