-- One page of a feed (relay.state.event_feed): the entries after a position, oldest first.
-- KEYS: 1 the feed's log (stream), 2 its positions (hash: event id -> entry id)
-- ARGV: 1 after: '' (from the start) or an event id, 2 at most this many entries
-- Returns: a JSON object (cjson): found (1, or 0 when `after` is not an event of this feed)
--   and, when any, entries: one object per entry, oldest first, with the entry's fields
--   (id, type, batch, body: the webhook's exact body, a string). Absent when none: cjson
--   would encode an empty list as {}.
local start = '-'
if ARGV[1] ~= '' then
  local at = redis.call('HGET', KEYS[2], ARGV[1])
  if not at then
    return cjson.encode({found = 0})
  end
  start = '(' .. at
end
local entries = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', tonumber(ARGV[2]))) do
  local fields, flat = {}, e[2]
  for i = 1, #flat, 2 do
    fields[flat[i]] = flat[i + 1]
  end
  entries[#entries + 1] = fields
end
if #entries == 0 then
  entries = nil
end
return cjson.encode({found = 1, entries = entries})
