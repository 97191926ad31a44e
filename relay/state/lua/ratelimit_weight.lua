-- Count a request that weighs more than one slot (an upload of several files: one slot a
-- file) in a sliding window, all or nothing: ARGV[3] more slots when that many are free,
-- else none. Beside them, up to ARGV[5] slots more for the caller's lease (at most a quarter
-- of what is left then), recorded ARGV[6] ms ahead of now, as ratelimit.lua records a lease's
-- (relay.state.rate_limits, leased slots). The window and its members are ratelimit.lua's.
-- KEYS: 1 the window (sorted set of admitted requests scored by server time in ms)
-- ARGV: 1 window (ms), 2 limit, 3 slots wanted (>= 1), 4 a member prefix unique to this
--       request (the slots are recorded as <prefix>:1..<granted>, the wanted ones first),
--       5 slots to lease beside them (0: none), 6 the lease's length (ms)
-- Returns: {slots granted (0: refused, nothing recorded; else ARGV[3] plus the leased ones),
--           remaining after them, ms until the oldest recorded slot leaves the window}; read
--           by relay.state.rate_limits.SlidingWindow.decide like ratelimit.lua's answer.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local more = tonumber(ARGV[5])
local ahead = tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local granted = 0
if count + want <= limit then
  local lease = math.min(more, math.floor((limit - count - want) / 4))
  local args = {}
  for i = 1, want + lease do
    args[#args + 1] = i > want and now + ahead or now
    args[#args + 1] = ARGV[4] .. ':' .. i
  end
  redis.call('ZADD', KEYS[1], unpack(args))
  granted = want + lease
  -- The window lives as long as its newest slot counts; GT keeps a longer life a lease
  -- gave it (an empty window was deleted by the trim: no life to keep).
  local life = lease > 0 and window + ahead or window
  if count == 0 then
    redis.call('PEXPIRE', KEYS[1], life)
  else
    redis.call('PEXPIRE', KEYS[1], life, 'GT')
  end
  count = count + granted
end
local reset = window
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then
  reset = tonumber(oldest[2]) + window - now
end
return {granted, math.max(limit - count, 0), reset}
