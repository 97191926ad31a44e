-- Sliding-window rate limit: at most ARGV[2] requests in any ARGV[1] milliseconds.
-- KEYS: 1 the window (sorted set of admitted requests scored by server time in ms)
-- ARGV: 1 window (ms), 2 limit, 3 a member unique to this request
-- Returns: {allowed (1/0), remaining after this request, ms until the oldest admitted request
--           leaves the window (the window length when it is empty)}
-- The one script with more than one value that answers a list, not a JSON object
-- (relay.scripts): it runs on every status request, where decoding JSON cost ~4 us more per
-- request than these three integers (docs/decisions.md); relay.ratelimit.SlidingWindow.decide
-- is its only reader.
-- Time is the Redis server's (TIME), so API processes on several machines share one clock.
-- A refused request is not recorded: a client hammering through a 429 is not punished
-- beyond the limit itself.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
-- Keep this trim the script's first write: Redis refuses a script at its first write that
-- may grow memory when maxmemory is reached, and a trim (which only frees) lets the rest
-- run, so the status endpoints keep answering while the store is full.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local allowed = 0
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  count = count + 1
  allowed = 1
end
redis.call('PEXPIRE', KEYS[1], window)
local reset = window
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then
  reset = tonumber(oldest[2]) + window - now
end
return {allowed, math.max(limit - count, 0), reset}
