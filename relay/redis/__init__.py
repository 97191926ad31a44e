"""Redis plumbing: clients that ride out failovers, request deadlines, the key space
and its shards, replica waits, and the status endpoints' multiplexed connection."""
