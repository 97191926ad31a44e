-- Register or replace a batch's callback URL (and enable it again).
-- KEYS: 1 batch, 2 webhook, 3 delivery_by_seq, 4 due
-- ARGV: 1 url, 2 now (ms), 3 the shard's key prefix (the completion's delivery),
--       4 '1' to verify the endpoint first (a webhook.verify challenge must be echoed),
--       5 the challenge, 6 account, 7 batch name, 8 the event types it asks for
--       (space-separated: batch.completed, document.succeeded, document.failed), 9 the
--       document statuses of those ('succeeded failed', 'failed', or ''): the batch's
--       `doc_events`, which the scripts that end its documents read (end_documents in _lib.lua)
-- Returns: a JSON object (cjson): created (1/0), seq (completion_seq if the batch is done
--   else 0), delivery (the id of that completion's delivery or ''), status (its status or ''),
--   hook (the webhook's hash as registered, HGETALL's field, value list: the API answers it
--   with no read of its own), repeated (1 when, with verify, it repeats the verification in
--   progress: nothing was written, and seq is 0; _lib.lua repeats_verification)
-- or the refusal 'missing' when the batch does not exist.
local b = redis.call('HMGET', KEYS[1], 'created_at', 'completed_at', 'completion_seq')
if not b[1] then
  return refuse('missing')
end
local created = register_hook(KEYS[2], KEYS[4], ARGV[3], ARGV[6], ARGV[7], ARGV[1], ARGV[2],
                              ARGV[4], ARGV[5], ARGV[8])
if created == -1 then
  return cjson.encode({created = 0, seq = 0, delivery = '', status = '', repeated = 1,
                       hook = redis.call('HGETALL', KEYS[2])})
end
redis.call('HSET', KEYS[2], 'events', ARGV[8])
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'doc_events', ARGV[9])
else
  redis.call('HDEL', KEYS[1], 'doc_events')
end
local seq = 0
if b[2] and b[2] ~= '' then
  seq = tonumber(b[3] or '0')
end
local dlv, status = '', ''
if seq > 0 then
  dlv = redis.call('HGET', KEYS[3], seq) or ''
  if dlv ~= '' then
    status = redis.call('HGET', key_delivery(ARGV[3], dlv), 'status') or ''
  end
end
local hook = redis.call('HGETALL', KEYS[2])
return cjson.encode({created = created, seq = seq, delivery = dlv, status = status, hook = hook})
