-- A worker ends a document read in slices from one of its slices (relay.runtime.slices):
-- `succeeded` with the result joined from every slice (by the last slice's worker), or
-- `failed` with a slice's error (the first slice to fail fails the document: its other
-- slices are dropped, and those being read are refused when stored). The document ends as in
-- finish.lua: completed_at, its result, its source kept (RELAY_KEEP_SOURCES, unless the batch
-- was deleted) or dropped, its charge, the batch's counters and, when it was the batch's last
-- open document, its completion.
-- KEYS: 1 batch, 2 leases, 3 outbox, 4 account_pending_bytes, 5 doc, 6 doc_items, 7 blob,
--       8 slices, 9 blob_deletions
-- ARGV: 1 doc id, 2 slice number, 3 lease token, 4 completed at (ms),
--       5 'succeeded' | 'failed', 6 result JSON, 7 error code, 8 error message, 9 '1' to keep
--       the document's source else '0'
-- Returns JSON (cjson): {stored = true | false (the slice's lease is not this worker's:
-- nothing changed), seq = completion_seq when the document completed the batch else 0,
-- freed = bytes the caller takes off the account's total (release_known), outside = the
-- KEYS[9] member recorded when a source outside Redis was dropped (absent otherwise)}.
local k = ARGV[2]
local d = redis.call('HMGET', KEYS[5], 'status', 'charged', 'counted', 'page_count', 'blob')
local s = redis.call('HMGET', KEYS[8], k .. ':state', k .. ':lease')
if d[1] ~= 'processing' or s[1] ~= 'processing' or s[2] ~= ARGV[3] then
  return cjson.encode({stored = false, seq = 0, freed = 0})
end
local outcome, now = ARGV[5], ARGV[4]
local keep = ARGV[9] == '1'
if keep then
  local deleted = redis.call('HGET', KEYS[1], 'deleted_at')
  keep = not deleted or deleted == ''
end
redis.call('HSET', KEYS[5], 'status', outcome, 'completed_at', now, 'lease', '',
           'error_code', ARGV[7], 'error_message', ARGV[8], 'blob', keep and (d[5] or '') or '',
           'charged', 0)
local succeeded, failed = 0, 1
if outcome == 'succeeded' then
  redis.call('SET', KEYS[6], ARGV[6])
  redis.call('HSET', KEYS[5], 'pages_done', d[4] or 0)
  succeeded, failed = 1, 0
end
local outside = nil
if not keep then
  redis.call('DEL', KEYS[7])
  outside = drop_outside(KEYS[9], d[5], ARGV[1], now)
end
local freed = release_known(KEYS[4], d[2], d[3])
drop_slices(KEYS[8], KEYS[2], ARGV[1])
local seq = end_documents(KEYS[1], KEYS[3], succeeded, failed, now,
                          {{key = KEYS[5], id = ARGV[1]}})
return cjson.encode({stored = true, seq = seq, freed = freed, outside = outside})
