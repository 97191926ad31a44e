-- Recovery: make one chunk of an index's failed (or canceled) deliveries created within
-- [since, until] due again now, each with its webhook-id and a fresh retry schedule (what
-- retry_delivery does for one). Those whose webhook is gone or disabled stay as they are
-- and are counted as skipped; they stay in the index, so the next call starts past them.
-- KEYS: 1 the index (deliveries:STATUS, or account:A:deliveries:STATUS), 2 due
-- ARGV: 1 the shard's key prefix, 2 now (ms), 3 since (ms), 4 until (ms), 5 chunk size,
--       6 offset (the skipped ones of earlier calls), 7 the status: 'failed' | 'canceled'
-- Returns: a JSON object (cjson): recovered, skipped, more (1 when more may match else 0)
-- The index moves of index_delivery (_lib.lua), done for the whole chunk with one variadic
-- command per index: a chunk of 500 costs ~2 commands per delivery instead of ~10.
local p, now, status = ARGV[1], ARGV[2], ARGV[7]
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[3], ARGV[4], 'LIMIT', ARGV[6], ARGV[5])
local recovered, skipped = 0, 0
local hooks = {}     -- webhook key -> usable (true/false)
local pointer = {}   -- webhook key -> the newest recovered delivery of its batch
local by_account = {}  -- account -> {created, id, created, id, ...}
local moved, due = {}, {}
for _, id in ipairs(ids) do
  local dk = key_delivery(p, id)
  local d = redis.call('HMGET', dk, 'status', 'account', 'batch', 'attempt_count', 'created_at',
                       'doc')
  local ok = false
  local wk = nil
  if d[1] == status and d[2] then
    wk = key_webhook(p, d[2], d[3])
    ok = hooks[wk]
    if ok == nil then
      local w = redis.call('HMGET', wk, 'url', 'disabled')
      ok = w[1] ~= false and w[2] ~= '1'
      hooks[wk] = ok
    end
  end
  if not ok then
    skipped = skipped + 1
  else
    redis.call('HSET', dk, 'status', 'pending', 'lease', '',
               'round_start', d[4] or redis.call('LLEN', key_delivery_attempts(p, id)),
               'next_attempt_at', now, 'updated_at', now)
    if d[6] and d[6] ~= '' then
      -- A document event's: pending again in its batch's batch_document_events (score 0, as
      -- index_delivery puts it), so a batch.completed recovered with it goes after it; never
      -- the webhook's `pending`, which is its batch.completed delivery.
      redis.call('ZADD', key_batch_document_events(p, d[2], d[3]), 0, d[6])
    else
      pointer[wk] = id
    end
    local acc = by_account[d[2]]
    if not acc then
      acc = {}
      by_account[d[2]] = acc
    end
    acc[#acc + 1] = d[5]
    acc[#acc + 1] = id
    moved[#moved + 1] = d[5]
    moved[#moved + 1] = id
    due[#due + 1] = now
    due[#due + 1] = id
    recovered = recovered + 1
  end
end

-- ZADD/ZREM with many members, 1,000 arguments at a time.
local function each_slice(list, step, fn)
  for i = 1, #list, step do
    fn(unpack(list, i, math.min(i + step - 1, #list)))
  end
end
local function members(pairs_)
  local out = {}
  for i = 2, #pairs_, 2 do
    out[#out + 1] = pairs_[i]
  end
  return out
end
if recovered > 0 then
  local from, to = key_status_deliveries(p, status), key_status_deliveries(p, 'pending')
  each_slice(members(moved), 1000, function(...) redis.call('ZREM', from, ...) end)
  each_slice(moved, 1000, function(...) redis.call('ZADD', to, ...) end)
  for account, acc in pairs(by_account) do
    local afrom = key_account_status_deliveries(p, account, status)
    local ato = key_account_status_deliveries(p, account, 'pending')
    each_slice(members(acc), 1000, function(...) redis.call('ZREM', afrom, ...) end)
    each_slice(acc, 1000, function(...) redis.call('ZADD', ato, ...) end)
  end
  each_slice(due, 1000, function(...) redis.call('ZADD', KEYS[2], ...) end)
  for wk, id in pairs(pointer) do
    redis.call('HSET', wk, 'pending', id)
  end
end
local more = 0
if #ids == tonumber(ARGV[5]) then
  more = 1
end
return cjson.encode({recovered = recovered, skipped = skipped, more = more})
