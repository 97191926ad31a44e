"""The retry policy as pure decisions."""

from __future__ import annotations

import random

import pytest

from relay.delivery.schedule import (
    FAILED,
    GONE,
    RETRY,
    SUCCEEDED,
    Decision,
    decide,
    parse_retry_after,
)

SCHEDULE = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
NOW = 1_800_000_000_000


def _decide(
    code: int | None, failed: int = 0, retry_after: str | None = None, jitter: float = 0
) -> Decision:
    return decide(
        status_code=code,
        retry_after=retry_after,
        failed_in_round=failed,
        schedule=SCHEDULE,
        jitter=jitter,
        now_ms=NOW,
        rng=random.Random(1),
    )


@pytest.mark.parametrize("code", [200, 201, 204, 299])
def test_2xx_succeeds(code: int) -> None:
    assert _decide(code).outcome == SUCCEEDED


def test_410_disables() -> None:
    assert _decide(410).outcome == GONE


@pytest.mark.parametrize("code", [None, 301, 302, 400, 404, 429, 500, 503])
def test_everything_else_waits_its_turn(code: int | None) -> None:
    d = _decide(code, failed=1)
    assert d.outcome == RETRY and d.next_at_ms == NOW + 300_000


def test_default_schedule_is_eight_attempts_over_about_27_6_hours() -> None:
    waited, attempts = 0.0, 1
    while (d := _decide(500, failed=attempts - 1)).outcome == RETRY:
        waited += (d.next_at_ms - NOW) / 1000
        attempts += 1
    assert d.outcome == FAILED and attempts == 8
    assert round(waited / 3600, 1) == 27.6


def test_jitter_adds_at_most_ten_percent() -> None:
    for seed in range(50):
        d = decide(
            status_code=500,
            retry_after=None,
            failed_in_round=2,
            schedule=SCHEDULE,
            jitter=0.1,
            now_ms=NOW,
            rng=random.Random(seed),
        )
        assert 1800_000 <= d.next_at_ms - NOW <= 1980_000


def test_retry_after_delays_but_is_capped_at_ten_times_the_schedule() -> None:
    assert _decide(429, failed=1, retry_after="600").next_at_ms == NOW + 600_000
    assert _decide(503, retry_after="3").next_at_ms == NOW + 5_000  # never sooner
    assert _decide(429, retry_after="999999").next_at_ms == NOW + 50_000  # 10 x 5 s
    assert _decide(500, retry_after="60").next_at_ms == NOW + 5_000  # only 429/503


def test_retry_after_http_date_and_garbage() -> None:
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:10 GMT", 1767225600000) == 10.0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after(None, NOW) is None
    assert parse_retry_after("-5", NOW) is None


@pytest.mark.parametrize(
    "value",
    [
        "²",
        "\u0661\u0662",  # Arabic-Indic digits
        "\uff11\uff12",  # fullwidth digits
        "1.5",
        "+3",
        "3 s",
        "Wed, 21 Oct 2015 07:28:00",
        "Wed, 21 Oct 99999 07:28:00 GMT",
        "\x00",
    ],
)
def test_retry_after_that_is_neither_ascii_digits_nor_an_http_date_is_ignored(value: str) -> None:
    # "²".isdigit() is true and float("²") raises: the attempt was never recorded.
    assert parse_retry_after(value, NOW) is None
    assert _decide(503, retry_after=value).next_at_ms == NOW + 5_000  # the schedule, as if absent


def test_retry_after_of_ascii_digits_of_any_length_is_capped_not_an_error() -> None:
    assert parse_retry_after(" 7 ", NOW) == 7.0
    assert _decide(503, retry_after="9" * 400).next_at_ms == NOW + 50_000
