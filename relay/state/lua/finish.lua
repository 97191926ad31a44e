-- Workers store documents' outcomes: processing -> succeeded | failed, for one document or
-- several of one batch at once (a turn's, relay.runtime.processing), the batch's counters read and
-- written once for them all, the results written by one MSET and the blobs deleted by one
-- DEL (two commands per document remain: its read and its write). When the batch's webhook
-- asks for document events, each document's event is raised here too (end_documents).
-- KEYS: 1 batch, 2 leases, 3 outbox, 4 account_pending_bytes, 5 blob_deletions, then 3 per
--       document: doc, doc_items, blob
-- ARGV: 1 '1' to keep the documents' sources (RELAY_KEEP_SOURCES) else '0', then 7 per
--       document: id, lease token, completed at (ms), 'succeeded' | 'failed', result JSON,
--       error code, error message
-- A kept source stays where it is (its blob key, or its file or object outside Redis), the
-- document's 'blob' field still naming the store, until the batch is deleted
-- (delete_batch.lua) or purged (purge_batch.lua); it no longer counts as pending bytes.
-- A deleted batch's documents keep nothing: the deletion has dropped the sources already.
-- Bytes dropped outside Redis go on KEYS[5] (drop_outside) for the caller to delete.
-- Returns JSON (cjson): {stored = [true | false per document: false when its lease was lost
-- (handed to another worker, or already ended) and its outcome dropped], seq =
-- completion_seq when these completed the batch else 0, freed = bytes the caller takes off
-- the account's total (release_known), kept = whether the sources were kept, outside = the
-- KEYS[5] members recorded now (absent when none)}.
local keep = ARGV[1] == '1'
if keep then
  local deleted = redis.call('HGET', KEYS[1], 'deleted_at')
  keep = not deleted or deleted == ''
end
local stored, ended, results, blobs, outside, docs = {}, {}, {}, {}, {}, {}
local counts = {succeeded = 0, failed = 0}
local last = '0'
local charged, freed = 0, 0
for i = 0, (#ARGV - 1) / 7 - 1 do
  local a = 1 + i * 7
  local dk = KEYS[6 + i * 3]
  local d = redis.call('HMGET', dk, 'status', 'lease', 'charged', 'counted', 'blob')
  if d[1] == 'processing' and d[2] == ARGV[a + 2] then
    local outcome, now = ARGV[a + 4], ARGV[a + 3]
    redis.call('HSET', dk, 'status', outcome, 'completed_at', now, 'lease', '',
               'error_code', ARGV[a + 6], 'error_message', ARGV[a + 7],
               'blob', keep and (d[5] or '') or '', 'charged', 0)
    if outcome == 'succeeded' then
      results[#results + 1] = KEYS[7 + i * 3]
      results[#results + 1] = ARGV[a + 5]
    end
    if not keep then
      blobs[#blobs + 1] = KEYS[8 + i * 3]
      outside[#outside + 1] = drop_outside(KEYS[5], d[5], ARGV[a + 1], now)
    end
    local c = tonumber(d[3] or '0') or 0
    if c > 0 then
      charged = charged + c
      if d[4] == '1' then
        freed = freed + c
      end
    end
    counts[outcome] = counts[outcome] + 1
    if tonumber(now) > tonumber(last) then
      last = now
    end
    ended[#ended + 1] = ARGV[a + 1]
    docs[#docs + 1] = {key = dk, id = ARGV[a + 1]}
    stored[i + 1] = true
  else
    stored[i + 1] = false
  end
end
-- unpack() has a stack limit: at most 1,000 values per command.
for i = 1, #results, 1000 do
  redis.call('MSET', unpack(results, i, math.min(i + 999, #results)))
end
for i = 1, #blobs, 1000 do
  redis.call('DEL', unpack(blobs, i, math.min(i + 999, #blobs)))
end
local seq = 0
if #ended > 0 then
  if charged > 0 and redis.call('DECRBY', KEYS[4], charged) <= 0 then
    redis.call('DEL', KEYS[4])
  end
  redis.call('ZREM', KEYS[2], unpack(ended))
  seq = end_documents(KEYS[1], KEYS[3], counts.succeeded, counts.failed, last, docs)
end
if #outside == 0 then
  outside = nil
end
return cjson.encode({stored = stored, seq = seq, freed = freed, kept = keep, outside = outside})
