-- The sweeper returns a slice whose lease expired (its worker was lost) to the front of its
-- batch's list in the fair queue: processing -> queued while its claims < max, else the
-- document fails worker_lost (its other slices dropped). The slices done stay done: a lost
-- worker costs the slice it held, never the document.
-- A failed document keeps its source as finish_slice.lua keeps one (RELAY_KEEP_SOURCES, its
-- batch not deleted). A slice whose worker gave its claim back while the blob store did not
-- answer (wait_blob.lua) comes back here when the time it waits until is over.
-- KEYS: 1 doc, 2 batch, 3 leases, 4 outbox, 5 blob, 6 account_pending_bytes, 7 slices,
--       8 blob_deletions
-- ARGV: 1 doc id, 2 slice number, 3 now (ms), 4 max claims, 5 the shard's key prefix (the
--       fair queue's keys derive from it), 6 account, 7 batch name, 8 '1' to keep a failed
--       document's source else '0'
-- Returns JSON (cjson): {outcome = 'requeued' | 'failed' | 'skip' (lease renewed meanwhile,
-- or the slice is not processing), freed = bytes the caller takes off the account's total
-- (release_known; failed only), outside = the KEYS[8] member recorded when a source outside
-- Redis was dropped (absent otherwise)}.
local k = ARGV[2]
local member = slice_member(ARGV[1], k)
local expiry = redis.call('ZSCORE', KEYS[3], member)
local d = redis.call('HMGET', KEYS[1], 'status', 'charged', 'counted', 'blob')
local s = redis.call('HMGET', KEYS[7], k .. ':state', k .. ':claims', k)
if d[1] ~= 'processing' or s[1] ~= 'processing' then
  redis.call('ZREM', KEYS[3], member)
  return cjson.encode({outcome = 'skip', freed = 0})
end
if expiry and tonumber(expiry) > tonumber(ARGV[3]) then
  return cjson.encode({outcome = 'skip', freed = 0})
end
redis.call('ZREM', KEYS[3], member)
if tonumber(s[2] or '0') >= tonumber(ARGV[4]) then
  local pages = s[3] or '?'
  local where = string.find(pages, '[-,]') and 'pages ' or 'page '
  local keep = ARGV[8] == '1'
  if keep then
    local deleted = redis.call('HGET', KEYS[2], 'deleted_at')
    keep = not deleted or deleted == ''
  end
  redis.call('HSET', KEYS[1], 'status', 'failed', 'completed_at', ARGV[3], 'lease', '',
             'error_code', 'worker_lost',
             'error_message', 'the worker reading ' .. where .. pages ..
             ' of this document was lost ' .. s[2] .. ' times',
             'blob', keep and (d[4] or '') or '', 'charged', 0)
  local freed = release_known(KEYS[6], d[2], d[3])
  local outside = nil
  if not keep then
    redis.call('DEL', KEYS[5])
    outside = drop_outside(KEYS[8], d[4], ARGV[1], ARGV[3])
  end
  drop_slices(KEYS[7], KEYS[3], ARGV[1])
  end_documents(KEYS[2], KEYS[4], 0, 1, ARGV[3], {{key = KEYS[1], id = ARGV[1]}})
  return cjson.encode({outcome = 'failed', freed = freed, outside = outside})
end
redis.call('HSET', KEYS[7], k .. ':state', 'queued', k .. ':lease', '')
fair_push(ARGV[5], ARGV[6], ARGV[7], {member}, true)
fair_count_slices(ARGV[5], 1)
return cjson.encode({outcome = 'requeued', freed = 0})
