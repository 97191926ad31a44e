-- Sliding-window rate limit: at most ARGV[2] requests in any ARGV[1] milliseconds.
-- KEYS: 1 the window (sorted set of admitted requests scored by server time in ms)
-- ARGV: 1 window (ms), 2 limit, 3 a member unique to this request; on a window that leases
--       slots (relay.state.rate_limits, leased slots) also 4 the most slots wanted, 5 the lease's length
--       (ms): slots asked for more than one at a time are recorded that far ahead of now (the
--       time by which each is used), and the window lives that much longer; 6... slots of
--       an earlier lease that went unused (removed first: they admitted nothing)
-- Returns: {slots granted (0: refused; 1 without ARGV[4]), remaining after them, ms until the
--           oldest recorded slot leaves the window (the window length when it is empty)}
-- The one script with more than one value that answers a list, not a JSON object
-- (relay.state.scripts): it runs on every status request, where decoding JSON cost ~4 us more per
-- request than these three integers (docs/decisions.md); relay.state.rate_limits.SlidingWindow.decide
-- is its only reader.
-- Time is the Redis server's (TIME), so API processes on several machines share one clock.
-- A refused request is not recorded: a client hammering through a 429 is not punished
-- beyond the limit itself.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local want = tonumber(ARGV[4]) or 1
local ahead = tonumber(ARGV[5]) or 0
-- Keep this trim the script's first write: Redis refuses a script at its first write that
-- may grow memory when maxmemory is reached, and a trim (which only frees) lets the rest
-- run, so the status endpoints keep answering while the store is full.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if #ARGV > 5 then
  redis.call('ZREM', KEYS[1], unpack(ARGV, 6))
end
local count = redis.call('ZCARD', KEYS[1])
local granted = 0
if count < limit then
  -- A lease takes at most a quarter of what is left, so the last slots go one at a time to
  -- whichever API process asks.
  granted = math.max(1, math.min(want, math.floor((limit - count) / 4)))
  local at = now
  if want > 1 then
    at = now + ahead
  end
  if granted == 1 then
    redis.call('ZADD', KEYS[1], at, ARGV[3])
  else
    local args = {}
    for i = 1, granted do
      args[#args + 1] = at
      args[#args + 1] = ARGV[3] .. ':' .. i
    end
    redis.call('ZADD', KEYS[1], unpack(args))
  end
  count = count + granted
end
redis.call('PEXPIRE', KEYS[1], window + ahead)
local reset = window
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then
  reset = tonumber(oldest[2]) + window - now
end
return {granted, math.max(limit - count, 0), reset}
