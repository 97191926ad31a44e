-- One page of a feed (relay.events): the entries after a position, oldest first.
-- KEYS: 1 the feed's log (stream), 2 its positions (hash: event id -> entry id)
-- ARGV: 1 after: '' (from the start) or an event id, 2 at most this many entries
-- Returns: {found (1, or 0 when `after` is not an event of this feed), entries as XRANGE}
local start = '-'
if ARGV[1] ~= '' then
  local at = redis.call('HGET', KEYS[2], ARGV[1])
  if not at then
    return {0, {}}
  end
  start = '(' .. at
end
return {1, redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', tonumber(ARGV[2]))}
