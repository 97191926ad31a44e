"""Fixtures for end-to-end runs: real API, worker and detector processes on a real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.client import close_all
from tests.support.procs import Stack
from tests.support.receiver import Receiver


@pytest.fixture
def stack(redis_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    """A stack with no process started yet; tests start what they need. Logs are printed
    when the test fails."""
    s = Stack(redis_url=redis_url, tmp=tmp_path)
    yield s
    close_all()
    s.close()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(s.logs())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "rep_" + rep.when, rep)
