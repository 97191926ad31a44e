-- Retention of one feed (relay.state.event_feed): its entries recorded before the cutoff go, with
-- their positions; an emptied feed goes entirely. Bounded per call.
-- KEYS: 1 the feed's log (stream), 2 its positions (hash), 3 the shard's event_logs
-- ARGV: 1 '<feed>:<account>' (the event_logs member), 2 cutoff (ms; entries before it go),
--       3 at most this many entries
-- Returns: how many entries were removed.
local old = redis.call('XRANGE', KEYS[1], '-', '(' .. ARGV[2] .. '-0', 'COUNT',
                       tonumber(ARGV[3]))
for _, e in ipairs(old) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'id' then
      redis.call('HDEL', KEYS[2], f[i + 1])
    end
  end
  redis.call('XDEL', KEYS[1], e[1])
end
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if first[1] then
  redis.call('ZADD', KEYS[3], string.match(first[1][1], '^(%d+)'), ARGV[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  -- Emptied: the key goes (a stream keeps its last id only while it exists, but positions
  -- are resolved through the hash, which goes with it: nothing can point into it).
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('ZREM', KEYS[3], ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return #old
