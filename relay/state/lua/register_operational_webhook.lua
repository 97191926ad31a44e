-- Register or replace an account's operational webhook, enabled (again) and not failing.
-- KEYS: 1 webhook (of the account's ~ops pseudo-batch), 2 due
-- ARGV: 1 url, 2 now (ms), 3 '1' to verify the endpoint first (register_webhook.lua),
--       4 the challenge, 5 the shard's key prefix, 6 account
-- Returns: 1 when it was created, 0 when an existing one was replaced, -1 when, with verify,
-- it repeats the verification in progress (nothing written; _lib.lua repeats_verification).
return register_hook(KEYS[1], KEYS[2], ARGV[5], ARGV[6], OPERATIONAL_BATCH, ARGV[1], ARGV[2],
                     ARGV[3], ARGV[4])
