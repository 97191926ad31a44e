"""Developer tooling: ``relay dev`` (a private Redis and a process supervisor).
Nothing that runs in production imports it."""
