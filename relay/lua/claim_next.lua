-- A worker claims the shard's next document fairly: the accounts with documents waiting take
-- turns (round-robin), an account's batches go in hand-out order, a batch's documents in
-- order. The document goes queued -> processing with a lease, as in claim.lua.
-- KEYS: 1 leases
-- ARGV: 1 the shard's key prefix (the fair queue's keys, documents and batches derive from
--       it; see _fair.lua), 2 now (ms), 3 lease (ms), 4 lease token,
--       5 at most this many entries taken per call (entries whose document is no longer
--       queued are dropped and the next one is taken)
-- Returns JSON (cjson): claim_doc's table with id, account and batch (the batch's name) added
--          and more = 1 when documents still wait in the shard; {claimed = false, more}
--          when nothing was claimed (more = 1: call again).
local p = ARGV[1]
local more = false
for _ = 1, tonumber(ARGV[5]) do
  local account, name, id
  account, name, id, more = fair_pop(p)
  if not account then
    return cjson.encode({claimed = false, more = 0})
  end
  if id then
    local c = claim_doc(key_doc(p, id), key_batch(p, account, name),
                        key_batch_started(p, account, name), KEYS[1], id, ARGV[2], ARGV[3],
                        ARGV[4])
    if c.claimed then
      c.id, c.account, c.batch = id, account, name
      c.more = more and 1 or 0
      return cjson.encode(c)
    end
  end
  if not more then
    return cjson.encode({claimed = false, more = 0})
  end
end
return cjson.encode({claimed = false, more = more and 1 or 0})
