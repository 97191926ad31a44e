-- One page of a delivery index, newest first, strictly after a cursor (reads only).
-- KEYS: 1 the index: a sorted set of delivery ids scored by created_at (ms)
-- ARGV: 1 max score (ms: the cursor's, or the upper bound), 2 the cursor's id ('' = none:
--       the max is inclusive), 3 min score (ms), 4 count,
--       5 status filter ('' = none; only for an index not already by status, a batch's),
--       6 the shard's key prefix (the status filter reads the deliveries)
-- Returns: a JSON object (cjson) of at most ARGV[4] entries, id -> score (the score as the
--   string Redis gives, exact), the first in (score, id) descending order, every one below
--   (ARGV[1], ARGV[2]) in that order; the caller sorts (relay.state.delivery_search.merge_pages).
-- Exact under ties: members of equal score are ordered by id. When the cursor's entry is
-- still in the index its rank says where to go on (O(log n + page)); when it has left
-- (status change, purge), the entries tied with it come first, then lower scores.
local maxs, cid, mins = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local n, status, p = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local out, taken = {}, 0
local function take(id, score)
  if status ~= '' and redis.call('HGET', key_delivery(p, id), 'status') ~= status then
    return
  end
  out[id] = score
  taken = taken + 1
end
-- An empty table encodes as {}: the empty object, as wanted.
local function reply() return cjson.encode(out) end

local rank = nil
if cid == '' then
  rank = nil
else
  local s = redis.call('ZSCORE', KEYS[1], cid)
  if s and tonumber(s) == maxs then
    rank = redis.call('ZREVRANK', KEYS[1], cid) + 1
  else
    for _, id in ipairs(redis.call('ZREVRANGEBYSCORE', KEYS[1], maxs, maxs)) do
      if taken >= n then
        return reply()
      end
      if id < cid and maxs >= mins then
        take(id, ARGV[1])
      end
    end
  end
end

-- Then page on, in chunks (one chunk unless a status filter drops entries).
local chunk = math.max(n, 64)
local offset = 0
while taken < n do
  local got
  if rank then
    got = redis.call('ZREVRANGE', KEYS[1], rank + offset, rank + offset + chunk - 1,
                     'WITHSCORES')
  else
    local top = maxs
    if cid ~= '' then
      top = '(' .. ARGV[1]
    end
    got = redis.call('ZREVRANGEBYSCORE', KEYS[1], top, mins, 'WITHSCORES', 'LIMIT', offset,
                     chunk)
  end
  for i = 1, #got, 2 do
    local score = tonumber(got[i + 1])
    if score < mins or taken >= n then
      return reply()
    end
    take(got[i], got[i + 1])
  end
  if #got < 2 * chunk then
    return reply()
  end
  offset = offset + chunk
end
return reply()
