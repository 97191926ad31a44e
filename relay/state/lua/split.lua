-- A worker splits a document it claimed into slices (a scan of more pages than
-- RELAY_SLICE_PAGES; relay.runtime.slices): each slice is a work item of the document's
-- batch, put at the front of the batch's list in the shard's fair queue (first slice first),
-- so that any worker takes them in fair order, each a turn (claim_next.lua). The document
-- stays `processing` (started_at and the batch's counters as they are); its own lease ends
-- (a slice has one while claimed) and it shows its pages (page_count, pages_done).
-- KEYS: 1 doc, 2 leases, 3 slices
-- ARGV: 1 doc id, 2 lease token, 3 the shard's key prefix (the fair queue's keys derive from
--       it), 4 account, 5 batch name, 6 kind ('pdf' | 'image'), 7 pages to read, then two per
--       slice, in page order: its pages (text, '5-8'), how many
-- Returns JSON (cjson): {split = 1, slices = how many}, or {split = 0} when the document's
-- lease is not this worker's (nothing changed).
local d = redis.call('HMGET', KEYS[1], 'status', 'lease')
if d[1] ~= 'processing' or d[2] ~= ARGV[2] then
  return cjson.encode({split = 0})
end
local n = (#ARGV - 7) / 2
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'n', n, 'kind', ARGV[6], 'done', 0, 'bytes', 0)
local entries = {}
for k = 1, n do
  redis.call('HSET', KEYS[3], k, ARGV[6 + 2 * k], k .. ':pages', ARGV[7 + 2 * k],
             k .. ':state', 'queued', k .. ':claims', 0)
  entries[n - k + 1] = slice_member(ARGV[1], k)  -- pushed to the front: the last first
end
redis.call('HSET', KEYS[1], 'lease', '', 'page_count', ARGV[7], 'pages_done', 0)
redis.call('ZREM', KEYS[2], ARGV[1])
fair_push(ARGV[3], ARGV[4], ARGV[5], entries, true)
fair_count_slices(ARGV[3], n)
return cjson.encode({split = 1, slices = n})
