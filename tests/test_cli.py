"""The ``relay`` command line as a newcomer meets it: which Redis it reads, what it says when
that Redis is not there, and how it refuses bad arguments."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import redis

from relay.cli import commands
from relay.config import load_settings
from relay.devtools import dev
from relay.logs import redact_url
from relay.state import api_keys
from tests.support.helpers import free_port, relay_cli


def _dev_checkout(tmp_path: Path, redis_url: str) -> Path:
    """A directory where ``relay dev`` ran: its state directory names its Redis."""
    checkout = tmp_path / "checkout"
    (checkout / ".relay").mkdir(parents=True)
    dev.write_private(checkout / ".relay" / dev.REDIS_URL_FILE, redis_url)
    return checkout


# -- which Redis ----------------------------------------------------------------------------


def test_commands_find_the_redis_of_relay_dev_in_this_checkout(
    redis_url: str, redis: redis.Redis, tmp_path: Path
) -> None:
    checkout = _dev_checkout(tmp_path, redis_url)
    below = checkout / "docs" / "deep"
    below.mkdir(parents=True)

    made = relay_cli(None, "keys", "create", "--account", "acme", cwd=below)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert api_keys.lookup_key(redis, key) == "acme"  # written into relay dev's Redis

    listed = relay_cli(None, "keys", "list", cwd=checkout)
    assert listed.returncode == 0, listed.stderr
    assert "acme" in listed.stdout and "active" in listed.stdout


def test_relay_redis_url_wins_over_relay_devs(redis_url: str, tmp_path: Path) -> None:
    checkout = _dev_checkout(tmp_path, redis_url)
    elsewhere = f"redis://127.0.0.1:{free_port()}/0"
    out = relay_cli(elsewhere, "deliveries", "list", cwd=checkout)
    assert out.returncode == 1
    assert f"cannot reach Redis at {elsewhere} (RELAY_REDIS_URL)" in out.stderr


def test_which_redis_names_its_source(tmp_path: Path) -> None:
    settings = load_settings(environ={}, dotenv=None)
    url, source = commands.which_redis(settings, explicit=False, cwd=tmp_path)
    assert url == "redis://127.0.0.1:6379/0"
    assert source == "the default; set RELAY_REDIS_URL, or start relay dev here"

    checkout = _dev_checkout(tmp_path, "redis://127.0.0.1:6390/0")
    url, source = commands.which_redis(settings, explicit=False, cwd=checkout)
    assert url == "redis://127.0.0.1:6390/0"
    assert source == f"the Redis of relay dev, from {checkout.resolve()}/.relay/redis.url"

    url, source = commands.which_redis(settings, explicit=True, cwd=checkout)
    assert (url, source) == ("redis://127.0.0.1:6379/0", "RELAY_REDIS_URL")


def test_only_operator_commands_take_the_redis_of_a_dev_checkout(tmp_path: Path) -> None:
    """serve, worker and detector never read .relay/redis.url: a dev checkout's file must not
    decide where a deployed process writes."""
    settings = load_settings(environ={}, dotenv=None)
    checkout = _dev_checkout(tmp_path, "redis://127.0.0.1:6390/0")
    for command in ("keys", "deliveries", "events", "reencrypt"):
        url, _ = commands.command_redis(command, settings, explicit=False, cwd=checkout)
        assert url == "redis://127.0.0.1:6390/0", command
    for command in ("serve", "worker", "detector", "dev"):
        url, source = commands.command_redis(command, settings, explicit=False, cwd=checkout)
        assert (url, source) == ("redis://127.0.0.1:6379/0", "the default RELAY_REDIS_URL")


def test_the_cli_masks_only_the_password() -> None:
    # The one masking helper (relay.logs) that the CLI, relay dev and the logs share.
    assert redact_url("redis://:s3cret@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("rediss://user:s3cret@h:1/0") == "rediss://user:***@h:1/0"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"


# -- failures are one line ------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("deliveries", "list"),
        ("deliveries", "retry", "--status", "failed"),
        ("keys", "list"),
        ("keys", "create", "--account", "acme"),
    ],
)
def test_an_unreachable_redis_is_one_line_and_exit_1(args: tuple[str, ...], tmp_path: Path) -> None:
    url = f"redis://:pw@127.0.0.1:{free_port()}/0"
    out = relay_cli(url, *args, cwd=tmp_path)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    host = url.replace(":pw@", ":***@")
    assert lines[0].startswith(f"relay: cannot reach Redis at {host} (RELAY_REDIS_URL): ")
    assert "pw@" not in out.stderr
    assert out.stdout == ""


def test_a_stopped_relay_dev_is_named_when_its_redis_is_gone(tmp_path: Path) -> None:
    gone = f"redis://127.0.0.1:{free_port()}/0"
    checkout = _dev_checkout(tmp_path, gone)
    out = relay_cli(None, "deliveries", "list", cwd=checkout)
    assert out.returncode == 1
    assert out.stderr.startswith(
        f"relay: cannot reach Redis at {gone} (the Redis of relay dev, from "
        f"{checkout.resolve()}/.relay/redis.url): "
    )


# -- arguments ------------------------------------------------------------------------------


def _parse_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        commands.main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


def test_a_bogus_status_is_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    line = _parse_error(["deliveries", "list", "--status", "bogus"], capsys)
    assert line.startswith("relay deliveries list: error: argument --status: invalid choice")
    for status in ("pending", "succeeded", "failed", "superseded", "canceled"):
        assert status in line
    line = _parse_error(["deliveries", "retry", "--status", "pending"], capsys)
    assert "invalid choice: 'pending'" in line


@pytest.mark.parametrize("account", ["ACME", "Acme", "-acme", "a" * 65, "ac me", ""])
def test_an_account_name_outside_the_rule_is_refused(
    account: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _parse_error(["keys", "create", f"--account={account}"], capsys)
    assert line == (
        f"relay keys create: error: argument --account: {account!r} is not an account name: "
        "1-64 of a-z 0-9 _ -, starting with a lowercase letter or a digit (e.g. acme)"
    )


def test_the_cli_and_auth_agree_on_account_names() -> None:
    for good in ("acme", "0day", "a_b-c", "a" * 64):
        assert commands.account_name(good) == good
        assert api_keys.ACCOUNT_RE.fullmatch(good)
    with pytest.raises(argparse.ArgumentTypeError):
        commands.account_name("ACME")


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _subparsers(child)
    return found


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{prog} {action.dest}"
        for prog, parser in _subparsers(commands.build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert missing == []
    progs = {prog for prog, _ in _subparsers(commands.build_parser())}
    assert "relay deliveries list" in progs and "relay keys create" in progs
