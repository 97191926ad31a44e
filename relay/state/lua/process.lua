-- Hand every queued document not yet handed out to the workers (idempotent): they join the
-- batch's list in the shard's fair queue (_fair.lua), where workers take them.
-- The documents not yet handed out are the batch's documents (its upload-ordered list) from
-- position `handed` on; a batch created by a version before `handed` keeps its own list of
-- them (KEYS[3], filled by upload.lua while the batch has no `handed`).
-- With page ranges (ARGV[7]), each document handed out keeps them in its hash (`pages`):
-- the claim reads them from there, so a document handed out again after a lost worker is
-- read with the ranges of the call that handed it out, whatever later calls asked.
-- KEYS: 1 batch, 2 batch_docs, 3 batch_pending (such an older batch's list)
-- ARGV: 1 fields (JSON list), 2 now (ms), 3 '1' to store the fields, 4 the shard's key prefix
--       (the fair queue's keys and the documents derive from it), 5 account, 6 batch name,
--       7 page ranges (canonical text, relay.extract.pages; '' for every page), 8 the
--       process call's trace context (W3C traceparent; '' when tracing is off): the
--       batch's `trace` from now on when documents are handed out (their completion's
-- Returns JSON (cjson): {handed = [the handed document ids] (absent when none), batch = the
-- batch's hash after the hand-out (field -> value)}, or the refusal 'deleted' / 'missing'.
local b = redis.call('HMGET', KEYS[1], 'created_at', 'deleted_at', 'handed')
if not b[1] then
  return refuse('missing')
end
if b[2] and b[2] ~= '' then
  return refuse('deleted')
end
local ids
local set = {}
if b[3] then
  local handed = tonumber(b[3])
  ids = redis.call('LRANGE', KEYS[2], handed, -1)
  if #ids > 0 then
    set = {'handed', handed + #ids}
  end
else
  ids = redis.call('LRANGE', KEYS[3], 0, -1)
  redis.call('DEL', KEYS[3])
end
if ARGV[3] == '1' then
  set[#set + 1] = 'fields'
  set[#set + 1] = ARGV[1]
end
if #ids > 0 and (ARGV[8] or '') ~= '' then
  set[#set + 1] = 'trace'
  set[#set + 1] = ARGV[8]
end
if #set > 0 then
  redis.call('HSET', KEYS[1], unpack(set))
end
if ARGV[7] ~= '' then
  for _, id in ipairs(ids) do
    redis.call('HSET', key_doc(ARGV[4], id), 'pages', ARGV[7])
  end
end
fair_push(ARGV[4], ARGV[5], ARGV[6], ids, false)
if #ids == 0 then
  ids = nil
end
-- The batch as it is now, for the API's answer (no read of its own).
local flat = redis.call('HGETALL', KEYS[1])
local batch = {}
for i = 1, #flat, 2 do
  batch[flat[i]] = flat[i + 1]
end
return cjson.encode({handed = ids, batch = batch})
