-- A worker claims the shard's next documents fairly: the accounts with documents waiting take
-- turns (round-robin), an account's batches go in hand-out order, a batch's documents in
-- order. One turn takes the first waiting document of the account's oldest batch and, behind
-- it in the same batch, more while they are small: at most ARGV[6] documents whose sizes
-- together stay within ARGV[7] bytes (the first is taken whatever its size). Each goes
-- queued -> processing with a lease, as in claim.lua; the batch's counters are read and
-- written once for them all. A slice of a document read across workers (an entry
-- `id#k`, split.lua) is a turn of its own: slice k goes queued -> processing with a lease
-- of its own (member `id#k` in `leases`), the document and the batch's counters unchanged.
-- KEYS: 1 leases
-- ARGV: 1 the shard's key prefix (the fair queue's keys, documents and batches derive from
--       it; see _fair.lua), 2 now (ms), 3 lease (ms), 4 lease token,
--       5 at most this many entries looked at per call (entries whose document is no longer
--       queued are dropped and the next ones are taken), 6 documents per turn,
--       7 bytes per turn
-- Returns an array: first JSON (cjson): {account, batch (its name), fields (the batch's JSON
--          list), claims = [{id, filename, content_type, blob, claims, freeable (the bytes
--          finishing it frees from the account's total, if it still holds them), pages (the
--          page ranges its hand-out asked for, '' for every page), trace (the document's
--          trace context when kept); for a slice also slice (its number), slices (how
--          many), slice_pages (its pages: a piece of the document's selected pages), kind;
--          claims then counts the slice's}, ...], more = 1 when documents still wait in the
--          shard, trace = the batch's trace context when kept}, without claims when nothing
--          was claimed
--          (more = 1: call again); then the bytes of each claimed document held in Redis
--          (held_in_redis), in claim order, nil when gone: read here with one MGET, so the
--          worker needs no round trip of its own for them (binary-safe: not in the JSON).
local p = ARGV[1]
local now, lease_ms, token = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local budget, per_turn, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ring = key_fair_ring(p)
local more = false
while budget > 0 do
  local account = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
  if not account then
    return {cjson.encode({more = 0})}
  end
  local ak = key_fair_account(p, account)
  local name = redis.call('LINDEX', ak, 0)
  local got, leases, started = {}, {}, {}
  local sliced = false  -- whether the turn is a slice
  local left = false  -- whether the account still has documents waiting
  if name then
    local rk = key_batch_ready(p, account, name)
    local want = math.min(per_turn, budget)
    local ids = redis.call('LRANGE', rk, 0, want - 1)
    local taken, bytes, slices = 0, 0, 0
    for i, id in ipairs(ids) do
      local of, k = parse_slice(id)
      if of and #got > 0 then
        break  -- a slice is a turn of its own
      end
      local d = {}
      if of then
        slices = slices + 1
        local sk = key_doc_slices(p, of)
        local s = redis.call('HMGET', sk, k .. ':state', k .. ':claims', k, 'n', 'kind')
        -- Not queued: its document ended meanwhile (the entry is dropped).
        if s[1] == 'queued' then
          d = redis.call('HMGET', key_doc(p, of), 'status', 'filename', 'content_type', 'blob',
                         'pages', 'trace')
        end
        if d[1] == 'processing' then
          local claims = tonumber(s[2] or '0') + 1
          redis.call('HSET', sk, k .. ':state', 'processing', k .. ':lease', token,
                     k .. ':claims', claims)
          got[1] = {id = of, slice = tonumber(k), slices = tonumber(s[4]), slice_pages = s[3],
                    kind = s[5], filename = d[2], content_type = d[3], blob = d[4],
                    claims = claims, freeable = 0, pages = d[5] or '', trace = d[6] or nil}
          leases = {tonumber(now) + lease_ms, id}
          sliced = true
        end
      else
        d = redis.call('HMGET', key_doc(p, id), 'status', 'filename', 'content_type', 'blob',
                       'claims', 'size', 'charged', 'counted', 'pages', 'trace')
      end
      if not of and d[1] == 'queued' then
        local size = tonumber(d[6] or '0') or 0
        if #got > 0 and bytes + size > max_bytes then
          break
        end
        bytes = bytes + size
        local claims = tonumber(d[5] or '0') + 1
        redis.call('HSET', key_doc(p, id), 'status', 'processing', 'started_at', now,
                   'lease', token, 'claims', claims)
        -- The bytes its finish frees from the account's total (release_known), so the
        -- worker can take them off in the same round trip as the finish.
        local freeable = 0
        if d[8] == '1' then
          freeable = tonumber(d[7] or '0') or 0
        end
        got[#got + 1] = {id = id, filename = d[2], content_type = d[3], blob = d[4],
                         claims = claims, freeable = freeable, pages = d[9] or '',
                         trace = d[10] or nil}
        leases[#leases + 1] = tonumber(now) + lease_ms
        leases[#leases + 1] = id
        started[#started + 1] = now
        started[#started + 1] = id
      end
      taken = i
      if sliced then
        break
      end
    end
    budget = budget - math.max(taken, 1)
    if taken > 0 then
      redis.call('LTRIM', rk, taken, -1)
      fair_uncount(p, taken)
      fair_count_slices(p, -slices)
    end
    -- Entries left behind (a break, or a list longer than looked at) keep the batch listed.
    left = taken < #ids or (#ids == want and redis.call('LLEN', rk) > 0)
    if not left then
      redis.call('LPOP', ak)
      left = redis.call('LLEN', ak) > 0
    end
  end
  if left then
    more = true
  else
    redis.call('RPOP', ring)  -- the account just rotated to the tail: it leaves the ring
    more = redis.call('LLEN', ring) > 0
  end
  if #got > 0 then
    redis.call('ZADD', KEYS[1], unpack(leases))
    local bk = key_batch(p, account, name)
    local b
    if sliced then  -- its document has been processing since its own claim
      b = redis.call('HMGET', bk, 'fields', 'trace')
    else
      redis.call('ZADD', key_batch_started(p, account, name), unpack(started))
      local c = redis.call('HMGET', bk, 'queued', 'processing', 'started_at', 'fields', 'trace')
      local first = c[3]
      if not first or first == '' or tonumber(first) > tonumber(now) then
        first = now
      end
      redis.call('HSET', bk, 'queued', tonumber(c[1] or '0') - #got,
                 'processing', tonumber(c[2] or '0') + #got, 'started_at', first)
      b = {c[4], c[5]}
    end
    local reply = {cjson.encode({account = account, batch = name, fields = b[1] or '[]',
                                 claims = got, more = more and 1 or 0, trace = b[2] or nil})}
    local held = {}
    for _, g in ipairs(got) do
      if held_in_redis(g.blob) then
        held[#held + 1] = key_blob(p, g.id)
      end
    end
    if #held > 0 then
      for _, bytes in ipairs(redis.call('MGET', unpack(held))) do
        reply[#reply + 1] = bytes
      end
    end
    return reply
  end
  if not more then
    return {cjson.encode({more = 0})}
  end
end
return {cjson.encode({more = more and 1 or 0})}
