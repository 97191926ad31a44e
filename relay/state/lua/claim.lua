-- A worker claims one named document: queued -> processing, started_at, a lease.
-- (Workers take documents through claim_next.lua; this serves a job naming its document.)
-- KEYS: 1 doc, 2 batch, 3 batch_started, 4 leases
-- ARGV: 1 doc id, 2 now (ms), 3 lease (ms), 4 lease token
-- Returns: claim_doc's table as JSON (cjson): {claimed, fields, filename, content_type, blob,
--          claims, pages} when claimed, {claimed = false, status} when the document is not queued.
-- A claimed document may still sit in its batch's fair-queue list: claim_next.lua skips it.
return cjson.encode(claim_doc(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3],
                              ARGV[4]))
