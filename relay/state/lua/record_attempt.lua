-- Record one delivery attempt and move the delivery on.
-- KEYS: 1 delivery, 2 delivery attempts, 3 due, 4 webhook, 5 outbox (operational events)
-- ARGV: 1 a JSON object (cjson), every value a string: id, token (the lease's), now (ms),
--       outcome ('succeeded' | 'retry' | 'failed' | 'gone'), next_at (ms, for 'retry'),
--       attempt (the attempt's JSON), reason (for 'gone'), keep (attempts kept, 0: all),
--       disable_after (RELAY_DISABLE_AFTER in ms, 0: never), clock (the store's clock, ms:
--       failing since, and the disable decision), disable_reason (auto-disable),
--       verify ('1' for an endpoint verification's challenge, webhook.verify; else '')
-- The attempt is always appended: it happened. The delivery moves on only while this
-- worker still holds its lease (a late answer after the lease passed on changes nothing
-- but the record). Returns 1 when the delivery moved on, 0 otherwise; 2 when it moved on
-- and, a document event's, released its batch's batch.completed delivery waiting for it
-- (index_delivery in _lib.lua: the caller wakes the shard).
-- The delivery's `attempt_count` counts every attempt; the list keeps the first and the
-- latest `keep` - 1. A delivery purged meanwhile (retention) gets no orphan list.
local A = cjson.decode(ARGV[1])
-- The delivery read once: what the lease check, the indexes and the events need.
local d = redis.call('HMGET', KEYS[1], 'status', 'lease', 'attempt_count', 'account',
                     'created_at', 'batch', 'url', 'doc')
if not d[1] then
  return 0  -- purged meanwhile
end
-- A delivery from before `attempt_count` counts what its list holds.
local count = tonumber(d[3] or redis.call('LLEN', KEYS[2])) + 1
local kept = redis.call('RPUSH', KEYS[2], A.attempt)
local keep = tonumber(A.keep)
if keep > 1 and kept > keep then
  local first = redis.call('LINDEX', KEYS[2], 0)
  redis.call('LTRIM', KEYS[2], 1 - keep, -1)
  redis.call('LPUSH', KEYS[2], first)
end
if d[1] ~= 'pending' or d[2] ~= A.token then
  redis.call('HSET', KEYS[1], 'attempt_count', count)
  return 0
end
local outcome = A.outcome
-- The delivery's fields, written by one HSET at the end.
local set = {'attempt_count', count, 'lease', '', 'updated_at', A.now}

-- Auto-disable (RELAY_DISABLE_AFTER): the webhook's `failing_since` is set by its first failed
-- attempt after a success or a registration, cleared by a success. A failed attempt that
-- many ms after it disables the webhook: a retry becomes `canceled` (attempts stop).
-- A 410 disables at once. The events go out at the end of the script.
local hook = redis.call('HMGET', KEYS[4], 'url', 'disabled', 'failing_since', 'verify_id',
                        'created_at', 'pending')
local disable = nil
-- An endpoint verification's challenge: its own short schedule decides, not
-- RELAY_DISABLE_AFTER; its last failure comes as 'gone' with the reason.
local verify = A.verify == '1' and hook[4] == A.id
if hook[1] and hook[2] ~= '1' and A.verify == '1' then
  if outcome == 'gone' then
    disable = A.reason
  end
elseif hook[1] and hook[2] ~= '1' then
  local clock = tonumber(A.clock)
  if outcome == 'succeeded' then
    if hook[3] and hook[3] ~= '' then
      redis.call('HSET', KEYS[4], 'failing_since', '')
    end
  elseif outcome == 'gone' then
    disable = A.reason
  else
    local since = tonumber(hook[3] or '')
    local after = tonumber(A.disable_after)
    if not since then
      redis.call('HSET', KEYS[4], 'failing_since', clock)
    elseif after > 0 and clock - since >= after then
      disable = A.disable_reason
      if outcome == 'retry' then
        outcome = 'canceled'
      end
    end
  end
end
-- (end of auto-disable)
if outcome == 'retry' then
  set[#set + 1] = 'next_attempt_at'
  set[#set + 1] = A.next_at
  redis.call('HSET', KEYS[1], unpack(set))
  redis.call('ZADD', KEYS[3], A.next_at, A.id)
  return 1
end
redis.call('ZREM', KEYS[3], A.id)
if hook[6] == A.id then
  redis.call('HSET', KEYS[4], 'pending', '')
end
local status = 'failed'
if outcome == 'succeeded' then
  status = 'succeeded'
  set[#set + 1] = 'succeeded_at'
  set[#set + 1] = A.now
elseif outcome == 'canceled' then
  status = 'canceled'
end
if outcome == 'gone' and not disable then
  redis.call('HSET', KEYS[4], 'disabled', '1', 'disabled_reason', A.reason,
             'updated_at', A.now)
end
set[#set + 1] = 'next_attempt_at'
set[#set + 1] = ''
set[#set + 1] = 'status'
set[#set + 1] = status
redis.call('HSET', KEYS[1], unpack(set))
-- The delivery indexes: pending -> the status it ended in.
local p = delivery_prefix(KEYS[1], A.id)
local released = index_delivery(p, A.id, 'pending', status, {d[4], d[5], d[6], d[8]}, A.now)

if verify then
  -- The verification ended: what was parked meanwhile goes now, or never.
  if outcome == 'succeeded' then
    redis.call('HSET', KEYS[4], 'verification', 'verified', 'challenge', '',
               'verified_at', A.now)
    release_parked(p, KEYS[3], d[4], d[6], A.now, false)
  else
    redis.call('HSET', KEYS[4], 'verification', 'failed')
    release_parked(p, KEYS[3], d[4], d[6], A.now, true)
  end
end

-- Operational events (emit_event in _lib.lua; none about the operational webhook's own).
-- A disable counts in the webhook's `disables`: the webhook (its `created_at`) and that
-- count name the event (relay.runtime.detector.operational_event_id), so the same disable redone
-- after a failover (this write lost with the old primary) keeps its id.
if disable then
  redis.call('HSET', KEYS[4], 'disabled', '1', 'disabled_reason', disable,
             'updated_at', A.now)
  local generation = redis.call('HINCRBY', KEYS[4], 'disables', 1)
  emit_event(KEYS[5], 'webhook.disabled', d[4], d[6], A.clock,
             {'url', hook[1], 'reason', disable, 'webhook_created_at', hook[5] or '',
              'generation', generation})
end
if outcome == 'failed' then
  local a = cjson.decode(A.attempt)
  local code = type(a.status_code) == 'number' and string.format('%d', a.status_code) or ''
  local err = type(a.error) == 'string' and a.error or ''
  emit_event(KEYS[5], 'delivery.failed', d[4], d[6], A.clock,
             {'id', A.id, 'url', d[7] or '', 'attempts', count, 'error', err,
              'status_code', code})
end
if released then
  return 2
end
return 1
