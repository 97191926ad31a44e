"""``relay deliveries list`` and ``recover`` as an operator runs them (a subprocess), on
thousands of deliveries: exact pages through the cursor, every account or one."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from relay.state.model import DeliveryStatus
from relay.timefmt import rfc3339
from tests.support.delivery_seed import Seeder
from tests.support.helpers import closed_after, relay_cli

_ID = re.compile(r"msg_[0-9a-f][a-z2-7]{20}")


@pytest.fixture(name="seed")
def seed_fixture(redis_url: str) -> Iterator[Seeder]:
    yield from closed_after(Seeder(redis_url))


def created_at(seed: Seeder, ident: str) -> int:
    return seed.get(ident).created_at


def listed(redis_url: str, *args: str) -> list[str]:
    """Every id ``relay deliveries list`` prints, following the cursor it prints on stderr."""
    ids: list[str] = []
    cursor: list[str] = []
    for _ in range(100):
        done = relay_cli(redis_url, "deliveries", "list", *args, *cursor)
        assert done.returncode == 0, done.stderr
        ids += [m.group(0) for m in map(_ID.match, done.stdout.splitlines()) if m]
        m = re.search(r"--cursor (\S+)\)", done.stderr)
        if m is None:
            return ids
        cursor = ["--cursor", m.group(1)]
    raise AssertionError("no last page")


def test_list_finds_the_oldest_failed_among_5000(redis_url: str, seed: Seeder) -> None:
    refs = [seed.batch(f"acct{i % 5}", f"b{i}") for i in range(50)]
    failed = [seed.delivery(refs[i * 3], "failed") for i in range(12)]  # the oldest
    for i in range(5000):
        seed.delivery(refs[i % 50], "succeeded")
    ids = listed(redis_url, "--status", "failed", "--limit", "5")
    assert ids == list(reversed(failed))
    one = listed(redis_url, "--status", "failed", "--account", "acct0")
    assert one == [i for i in reversed(failed) if (failed.index(i) * 3) % 5 == 0]
    since = rfc3339(created_at(seed, failed[4]))
    until = listed(redis_url, "--status", "failed", "--until", str(since))
    assert until == list(reversed(failed[:4]))
    bad = relay_cli(redis_url, "deliveries", "list", "--batch", "b0")
    assert bad.returncode == 2 and "--account" in bad.stderr


def test_recover_every_account_with_progress(redis_url: str, seed: Seeder) -> None:
    refs = [seed.batch(f"acct{i % 3}", f"b{i}") for i in range(9)]
    old = seed.delivery(refs[0], "failed")
    seed.clock.advance(60_000)
    since = str(rfc3339(seed.clock() + 1))
    failed = [seed.delivery(refs[i % 9], "failed") for i in range(30)]
    ok = seed.delivery(refs[1], "succeeded")
    done = relay_cli(redis_url, "deliveries", "recover", "--since", since)
    assert done.returncode == 0, done.stderr
    assert "30 delivery(ies) recovered, 0 skipped" in done.stdout
    assert "recovered" in done.stderr  # progress
    status = {i: seed.get(i).status for i in [old, ok, *failed]}
    assert status[old] is DeliveryStatus.FAILED and status[ok] is DeliveryStatus.SUCCEEDED
    assert all(status[i] is DeliveryStatus.PENDING for i in failed)
    again = relay_cli(redis_url, "deliveries", "recover", "--since", "2020-01-01T00:00:00Z")
    assert "1 delivery(ies) recovered" in again.stdout
    assert relay_cli(redis_url, "deliveries", "recover", "--since", "soon").returncode == 2
