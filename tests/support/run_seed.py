"""The schemathesis seed of a test run: drawn once per run, shared by every pytest process.

Under pytest-xdist each worker imports the test modules on its own; a seed drawn at import
would differ from worker to worker and could not be named once. The controller draws it in
``pytest_configure`` (before the workers start, and they inherit its environment), prints it
in the run's header, and every process reads the same value.
"""

from __future__ import annotations

import os
import random

# Not RELAY_-prefixed: relay refuses unknown RELAY_ variables, and the tests that load
# settings from the environment would meet it.
SEED_VARIABLE = "SCHEMATHESIS_SEED"


def run_seed() -> int:
    """The run's seed: ``SCHEMATHESIS_SEED`` when set (a replay), else drawn now and
    stored there for the processes started after."""
    value = os.environ.get(SEED_VARIABLE)
    if not value:
        value = str(random.SystemRandom().randrange(2**32))
        os.environ[SEED_VARIABLE] = value
    return int(value)


def replay_hint(seed: int) -> str:
    return f"replay this run's draws with {SEED_VARIABLE}={seed}"
