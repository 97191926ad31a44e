-- A worker could not fetch a claimed document's bytes: the blob store (RELAY_BLOB_URL: S3, the
-- directory) did not answer. Unless the document has waited ARGV[5] ms already, the claim is
-- given back, uncounted (its claims, or its slice's, -1), and the document waits: its lease
-- (or its slice's) now ends with no owner (renewals and outcomes of this claim are refused
-- from here) after a pause as long as it has waited so far, at least 1 s and at most ARGV[4]
-- ms (1 s, 1 s, 2 s, 4 s, ...), and the sweeper then puts it back at the front of its batch's
-- list (requeue.lua, requeue_slice.lua), to be claimed and tried again. Its first wait is kept
-- in `blob_wait_since`: the wait is counted from there, for the life of the document.
-- KEYS: 1 doc, 2 leases, 3 slices (of a slice's claim; the document's slices key otherwise)
-- ARGV: 1 doc id, 2 lease token, 3 now (ms), 4 the longest pause (ms), 5 the most ms a
--       document waits,
--       6 slice number ('' for the document's own claim)
-- Returns JSON (cjson): {outcome = 'waits' | 'expired' (waited ARGV[5] already: the caller
-- fails it, as with any outcome) | 'lost' (the claim is no longer this worker's: nothing
-- changed), since = the first wait (ms), until = when it is tried again (ms; 'waits')}.
local d = redis.call('HMGET', KEYS[1], 'status', 'lease', 'blob_wait_since')
local k = ARGV[6]
if d[1] ~= 'processing' then
  return cjson.encode({outcome = 'lost', since = 0})
end
if k == '' then
  if d[2] ~= ARGV[2] then
    return cjson.encode({outcome = 'lost', since = 0})
  end
elseif redis.call('HGET', KEYS[3], k .. ':lease') ~= ARGV[2] or
       redis.call('HGET', KEYS[3], k .. ':state') ~= 'processing' then
  return cjson.encode({outcome = 'lost', since = 0})
end
local now = tonumber(ARGV[3])
local since = tonumber(d[3] or '') or now
if now - since >= tonumber(ARGV[5]) then
  return cjson.encode({outcome = 'expired', since = since})
end
if not d[3] or d[3] == '' then
  redis.call('HSET', KEYS[1], 'blob_wait_since', since)
end
local til = now + math.min(tonumber(ARGV[4]), math.max(1000, now - since))
if k == '' then
  redis.call('HSET', KEYS[1], 'lease', '')
  redis.call('HINCRBY', KEYS[1], 'claims', -1)
  redis.call('ZADD', KEYS[2], til, ARGV[1])
else
  redis.call('HSET', KEYS[3], k .. ':lease', '')
  redis.call('HINCRBY', KEYS[3], k .. ':claims', -1)
  redis.call('ZADD', KEYS[2], til, slice_member(ARGV[1], k))
end
return cjson.encode({outcome = 'waits', since = since, ['until'] = til})
