-- Turn one batch completion into exactly one delivery (idempotent on batch + seq), supersede
-- the batch's older delivery if it is still pending, and make the new one due now; or one
-- document event, or one operational event, into its delivery (idempotent on its id).
-- KEYS: 1 webhook, 2 delivery_by_seq, 3 batch_deliveries, 4 due, 5 shard_deliveries,
--       6 new delivery
-- ARGV: 1 the delivery id (a completion's: relay.redis.keyspace.completion_id), 2 account,
--       3 batch name, 4 completion_seq, 5 now (ms), 6 body (exact JSON bytes),
--       7 the shard's key prefix (the older delivery),
--       8 the batch's completed_at (ms) for this completion,
--       9 'event' for an operational event's delivery (ARGV[3] is then relay.redis.keyspace.OPERATIONAL_BATCH
--         and ARGV[4] the event's id): it supersedes nothing and is not the webhook's
--         `pending` one (every event is delivered), and its seq is 0;
--         'verify' for an endpoint verification's challenge (as 'event', and it becomes the
--         webhook's `verify_id`: the one delivery sent while the verification is pending);
--         'document' for a document event's (as 'event', made only when the webhook asks for
--         its type; ARGV[4] is 0; it keeps the batch's batch_document_events true:
--         index_delivery in _lib.lua; not in delivery_by_seq: its id is the key);
--         '' (or absent) for a completion's (made only when the webhook asks for
--         batch.completed),
--       10 the delivery's trace context (W3C traceparent; absent or '' for none): its
--          attempts' spans are its children (relay.tracing),
--       11 the event's type and 12 the document's id ('document' only)
-- Returns (JSON): {created: true, id} created; {created: false, id} already exists for this
--          seq or under this id; {created: false, id: ''} no usable webhook, or the webhook
--          does not ask for this type of event.
local mode = ARGV[9] or ''
local document = mode == 'document'
if not document then
  local existing = redis.call('HGET', KEYS[2], ARGV[4])
  if existing then
    return cjson.encode({created = false, id = existing})
  end
end
-- A completion's id is derived from the completion (relay.redis.keyspace.completion_id), a
-- document event's from the document: a delivery that exists under it already is this one,
-- never to be made twice nor overwritten.
if redis.call('EXISTS', KEYS[6]) == 1 then
  return cjson.encode({created = false, id = ARGV[1]})
end
local w = redis.call('HMGET', KEYS[1], 'url', 'disabled', 'pending', 'verification',
                     'verify_id', 'events')
local verify = mode == 'verify'
local event = mode == 'event' or verify
-- The types the webhook asks for (register_webhook.lua; none recorded: batch.completed);
-- an operational event's and a challenge's delivery are not chosen by type.
local wanted = true
if not event then
  local types = w[6]
  if not types or types == '' then
    types = 'batch.completed'
  end
  local kind = document and ARGV[11] or 'batch.completed'
  wanted = string.find(' ' .. types .. ' ', ' ' .. kind .. ' ', 1, true) ~= nil
end
if not w[1] or w[2] == '1' or not wanted then
  if document then  -- no delivery will settle it: settled now
    settle_document_event(ARGV[7], ARGV[2], ARGV[3], ARGV[12], ARGV[5])
  end
  return cjson.encode({created = false, id = ''})
end
if verify and w[5] and w[5] ~= '' then
  -- A new challenge replaces the previous one: its delivery, if still pending, goes.
  local older = key_delivery(ARGV[7], w[5])
  if redis.call('HGET', older, 'status') == 'pending' then
    redis.call('HSET', older, 'status', 'superseded', 'next_attempt_at', '', 'lease', '',
               'updated_at', ARGV[5])
    redis.call('ZREM', KEYS[4], w[5])
    index_delivery(ARGV[7], w[5], 'pending', 'superseded')
  end
end
if verify then
  redis.call('HSET', KEYS[1], 'verify_id', ARGV[1])
end
-- While a verification is pending nothing supersedes: every notification waits for it.
if not event and not document and w[4] ~= 'pending' and w[3] and w[3] ~= '' then
  local older = key_delivery(ARGV[7], w[3])
  local o = redis.call('HMGET', older, 'status', 'seq')
  if o[1] == 'pending' and tonumber(o[2]) < tonumber(ARGV[4]) then
    redis.call('HSET', older, 'status', 'superseded', 'next_attempt_at', '', 'lease', '',
               'updated_at', ARGV[5])
    redis.call('ZREM', KEYS[4], w[3])
    index_delivery(ARGV[7], w[3], 'pending', 'superseded')  -- the delivery indexes
  end
end
local fields = {'id', ARGV[1], 'account', ARGV[2], 'batch', ARGV[3], 'seq', ARGV[4],
                'url', w[1], 'status', 'pending', 'created_at', ARGV[5],
                'updated_at', ARGV[5], 'next_attempt_at', ARGV[5], 'lease', '',
                'round_start', 0, 'body', ARGV[6], 'completed_at', ARGV[8],
                'attempt_count', 0}
if (ARGV[10] or '') ~= '' then
  fields[#fields + 1] = 'trace'
  fields[#fields + 1] = ARGV[10]
end
local doc = ''
if document then
  doc = ARGV[12]
  fields[#fields + 1] = 'type'
  fields[#fields + 1] = ARGV[11]
  fields[#fields + 1] = 'doc'
  fields[#fields + 1] = doc
end
redis.call('HSET', KEYS[6], unpack(fields))
if not document then
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[1])
  if event then
    redis.call('HSET', KEYS[6], 'seq', 0, 'event', ARGV[4])
    redis.call('ZADD', key_events(ARGV[7]), ARGV[5], ARGV[1])  -- purged after the retention
  else
    redis.call('HSET', KEYS[1], 'pending', ARGV[1])
  end
end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[5], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
-- The delivery indexes (and, for a document event, the batch's batch_document_events).
index_delivery(ARGV[7], ARGV[1], '', 'pending', {ARGV[2], ARGV[5], ARGV[3], doc})
return cjson.encode({created = true, id = ARGV[1]})
