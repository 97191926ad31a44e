-- Register or replace an account's operational webhook, enabled (again) and not failing.
-- KEYS: 1 webhook (of the account's ~ops pseudo-batch), 2 due
-- ARGV: 1 url, 2 now (ms), 3 '1' to verify the endpoint first (register_webhook.lua),
--       4 the challenge, 5 the shard's key prefix, 6 account
-- Returns: 1 when it was created, 0 when an existing one was replaced.
local was = redis.call('HGET', KEYS[1], 'verification')
local created = redis.call('HSETNX', KEYS[1], 'created_at', ARGV[2])
redis.call('HSET', KEYS[1], 'url', ARGV[1], 'updated_at', ARGV[2], 'disabled', '0',
           'disabled_reason', '', 'failing_since', '')
redis.call('HSETNX', KEYS[1], 'pending', '')
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'verification', 'pending', 'challenge', ARGV[4],
             'verified_at', '')
else
  redis.call('HSET', KEYS[1], 'verification', '', 'challenge', '', 'verify_id', '')
  if was == 'pending' then
    release_parked(ARGV[5], KEYS[2], ARGV[6], OPERATIONAL_BATCH, ARGV[2], false)
  end
end
return created
