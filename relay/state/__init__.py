"""The state layer: every record relay keeps in Redis, its transitions (the Lua
scripts in ``lua/``) and its reads. Knows nothing of HTTP or of processes."""
