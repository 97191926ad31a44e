-- The sweeper returns a document whose lease expired (its worker was lost):
-- processing -> queued (started_at null) while claims < max, else -> failed worker_lost.
-- KEYS: 1 doc, 2 batch, 3 batch_started, 4 leases, 5 outbox, 6 blob, 7 account_pending_bytes,
--       8 blob_deletions
-- ARGV: 1 doc id, 2 now (ms), 3 max claims, 4 the shard's key prefix (the fair queue's keys
--       derive from it), 5 account, 6 batch name, 7 '1' to keep a failed document's source
--       (RELAY_KEEP_SOURCES, as finish.lua keeps it) else '0'
-- A requeued document goes to the front of its batch's list in the fair queue. So does one
-- whose worker gave its claim back while the blob store did not answer (wait_blob.lua): its
-- lease then ends at the time it waits until, with no owner, and its claims were not counted.
-- Returns JSON (cjson): {outcome = 'requeued' | 'failed' | 'skip' (lease renewed meanwhile,
-- or not processing), freed = bytes the caller takes off the account's total (release_known;
-- failed only), outside = the KEYS[8] member recorded when it failed without keeping a source
-- that is outside Redis (drop_outside; absent otherwise): the caller deletes it}.
local expiry = redis.call('ZSCORE', KEYS[4], ARGV[1])
local d = redis.call('HMGET', KEYS[1], 'status', 'claims', 'charged', 'counted', 'blob')
if d[1] ~= 'processing' then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return cjson.encode({outcome = 'skip', freed = 0})
end
if expiry and tonumber(expiry) > tonumber(ARGV[2]) then
  return cjson.encode({outcome = 'skip', freed = 0})
end
redis.call('ZREM', KEYS[4], ARGV[1])
if tonumber(d[2] or '0') >= tonumber(ARGV[3]) then
  local keep = ARGV[7] == '1'
  if keep then
    local deleted = redis.call('HGET', KEYS[2], 'deleted_at')
    keep = not deleted or deleted == ''
  end
  local blob = d[5] or ''
  redis.call('HSET', KEYS[1], 'status', 'failed', 'completed_at', ARGV[2], 'lease', '',
             'error_code', 'worker_lost',
             'error_message', 'the worker processing this document was lost ' .. d[2] ..
             ' times', 'blob', keep and blob or '', 'charged', 0)
  local freed = release_known(KEYS[7], d[3], d[4])
  local outside = nil
  if not keep then
    redis.call('DEL', KEYS[6])
    outside = drop_outside(KEYS[8], blob, ARGV[1], ARGV[2])
  end
  end_documents(KEYS[2], KEYS[5], 0, 1, ARGV[2], {{key = KEYS[1], id = ARGV[1]}})
  return cjson.encode({outcome = 'failed', freed = freed, outside = outside})
end
redis.call('HINCRBY', KEYS[2], 'processing', -1)
redis.call('HSET', KEYS[1], 'status', 'queued', 'started_at', '', 'lease', '')
redis.call('HINCRBY', KEYS[2], 'queued', 1)
redis.call('ZREM', KEYS[3], ARGV[1])
refresh_started(KEYS[2], KEYS[3])
fair_push(ARGV[4], ARGV[5], ARGV[6], {ARGV[1]}, true)
return cjson.encode({outcome = 'requeued', freed = 0})
