-- The fair queue of handed-out documents, prepended to every script after _lib.lua.
--
-- Per shard: a ring of the accounts with documents waiting (served round-robin), per account
-- a FIFO list of its batches with documents waiting, per batch a FIFO list of its waiting
-- document ids, and a counter of them all (the `queued` gauge). Invariants every helper keeps:
-- an account is in the ring exactly while its list is non-empty; a batch is in its account's
-- list exactly while its own list is non-empty. So taking the next document is O(1), and
-- dropping a deleted batch costs O(batches and accounts waiting in the shard), never
-- O(documents). Its keys (key_batch_ready, key_fair_account, key_fair_ring, key_waiting, ...)
-- are the functions relay/state/scripts.py writes from relay/redis/keyspace.py.

-- Count documents off the shard's waiting counter; at zero the key goes (nothing is kept
-- for a shard with nothing waiting).
local function fair_uncount(p, n)
  if redis.call('DECRBY', key_waiting(p), n) <= 0 then
    redis.call('DEL', key_waiting(p))
  end
end

-- Count `n` (negative: off) on the shard's counter of waiting entries that are slices of
-- documents (a subset of `waiting`'s); at zero the key goes.
local function fair_count_slices(p, n)
  if n ~= 0 and redis.call('INCRBY', key_waiting_slices(p), n) <= 0 then
    redis.call('DEL', key_waiting_slices(p))
  end
end

-- Append `ids` to the batch's waiting documents (at the front when `front`, for a document
-- handed out again), enlisting the batch and its account when they had nothing waiting.
local function fair_push(p, account, name, ids, front)
  if #ids == 0 then
    return
  end
  local rk = key_batch_ready(p, account, name)
  local was = redis.call('LLEN', rk)
  for i = 1, #ids, 1000 do  -- unpack() has a stack limit: 1,000 ids per command
    redis.call(front and 'LPUSH' or 'RPUSH', rk, unpack(ids, i, math.min(i + 999, #ids)))
  end
  redis.call('INCRBY', key_waiting(p), #ids)
  if was == 0 and redis.call('RPUSH', key_fair_account(p, account), name) == 1 then
    redis.call('RPUSH', key_fair_ring(p), account)
  end
end

-- Remove a batch's waiting documents from the fair queue (its deletion cancels them).
local function fair_drop_batch(p, account, name)
  local rk = key_batch_ready(p, account, name)
  local n = redis.call('LLEN', rk)
  if n == 0 then
    return
  end
  redis.call('DEL', rk)
  fair_uncount(p, n)
  local ak = key_fair_account(p, account)
  redis.call('LREM', ak, 1, name)
  if redis.call('LLEN', ak) == 0 then
    redis.call('LREM', key_fair_ring(p), 1, account)
  end
end

-- queued -> processing: started_at, a lease (score in `leases_key`), the batch's counters
-- (read and written at once: one HMGET, one HSET).
-- Returns a table (the scripts send it as JSON): {claimed = true, fields (the batch's JSON
-- list), filename, content_type, blob (its ref), claims, pages (the page ranges its hand-out
-- asked for, '' for every page), trace and batch_trace (the document's and the batch's
-- trace contexts, when kept)} when claimed, {claimed = false, status} when the document
-- is not queued (another worker has it, or it ended).
local function claim_doc(doc_key, batch_key, started_key, leases_key, id, now, lease_ms, token)
  local d = redis.call('HMGET', doc_key, 'status', 'filename', 'content_type', 'blob', 'claims',
                       'pages', 'trace')
  if d[1] ~= 'queued' then
    return {claimed = false, status = d[1] or 'missing'}
  end
  local claims = tonumber(d[5] or '0') + 1
  redis.call('HSET', doc_key, 'status', 'processing', 'started_at', now, 'lease', token,
             'claims', claims)
  redis.call('ZADD', leases_key, tonumber(now) + tonumber(lease_ms), id)
  redis.call('ZADD', started_key, now, id)
  local b = redis.call('HMGET', batch_key, 'queued', 'processing', 'started_at', 'fields',
                       'trace')
  local started = b[3]
  if not started or started == '' or tonumber(started) > tonumber(now) then
    started = now
  end
  redis.call('HSET', batch_key, 'queued', tonumber(b[1] or '0') - 1,
             'processing', tonumber(b[2] or '0') + 1, 'started_at', started)
  return {claimed = true, fields = b[4] or '[]', filename = d[2], content_type = d[3],
          blob = d[4], claims = claims, pages = d[6] or '', trace = d[7] or nil,
          batch_trace = b[5] or nil}
end
