-- Register or replace an account's operational webhook, enabled (again) and not failing.
-- KEYS: 1 webhook (of the account's ~ops pseudo-batch)
-- ARGV: 1 url, 2 now (ms)
-- Returns: 1 when it was created, 0 when an existing one was replaced.
local created = redis.call('HSETNX', KEYS[1], 'created_at', ARGV[2])
redis.call('HSET', KEYS[1], 'url', ARGV[1], 'updated_at', ARGV[2], 'disabled', '0',
           'disabled_reason', '', 'failing_since', '')
redis.call('HSETNX', KEYS[1], 'pending', '')
return created
