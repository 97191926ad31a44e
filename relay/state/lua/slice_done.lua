-- A worker stores the result of a slice it read (relay.runtime.slices; the tables of its
-- pages as read): the slice is done and the document's pages_done grows. The last slice of
-- the document is not stored: its worker joins every slice's tables and ends the document
-- (finish_slice.lua), keeping the slice's lease meanwhile, so a worker lost while joining
-- loses that one slice (read again and joined by another), never the document.
-- KEYS: 1 doc, 2 slices, 3 leases
-- ARGV: 1 doc id, 2 slice number, 3 lease token, 4 the slice's result (JSON), 5 most bytes
--       the stored results of a document's slices may hold together (RELAY_MAX_RESULT_BYTES)
-- Returns JSON (cjson): {outcome = 'done' | 'last' (join, then finish_slice.lua) | 'lost'
-- (the slice's lease is not this worker's: dropped) | 'too_large' (the slices' results
-- would pass the bound: nothing stored)}.
local k = ARGV[2]
local s = redis.call('HMGET', KEYS[2], k .. ':state', k .. ':lease', k .. ':pages', 'n', 'done',
                     'bytes')
if redis.call('HGET', KEYS[1], 'status') ~= 'processing' or s[1] ~= 'processing' or
   s[2] ~= ARGV[3] then
  return cjson.encode({outcome = 'lost'})
end
local bytes = tonumber(s[6] or '0') + #ARGV[4]
if bytes > tonumber(ARGV[5]) then
  return cjson.encode({outcome = 'too_large'})
end
local done = tonumber(s[5] or '0') + 1
if done == tonumber(s[4]) then
  return cjson.encode({outcome = 'last'})
end
redis.call('HSET', KEYS[2], k .. ':state', 'done', k .. ':lease', '', k .. ':tables', ARGV[4],
           'done', done, 'bytes', bytes)
redis.call('HINCRBY', KEYS[1], 'pages_done', tonumber(s[3] or '0'))
redis.call('ZREM', KEYS[3], slice_member(ARGV[1], k))
return cjson.encode({outcome = 'done'})
