"""The README's quick start: what ``relay dev`` prints is the README's block, and the block,
run as it stands on a fresh clone, ends with the receiver printing a notification it verified
(v1 and v1a) on the first attempt."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from bench.quickstart import quickstart_blocks, run_quickstart
from relay.config import load_settings
from relay.devtools import dev

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_block_is_what_relay_dev_prints() -> None:
    first, second = quickstart_blocks(ROOT / "README.md")
    assert first == "git clone <this repo> relay && cd relay\nmake run\n"
    assert second == dev.TRY_IT
    text = dev.banner(
        base_url="http://127.0.0.1:8000",
        api_key="rk_abc",
        redis_url="redis://127.0.0.1:6390/0",
        state_dir=Path.cwd() / ".relay",
    )
    printed = "\n".join(line.removeprefix("    ") for line in text.splitlines())
    assert second.rstrip("\n") in printed


def test_relay_dev_prints_the_block_for_its_own_port_and_state_dir(tmp_path: Path) -> None:
    text = dev.try_it(port=8123, state_dir=tmp_path)
    assert text.startswith("export RELAY_PORT=8123\n")
    assert f"DEV_KEY=$(cat {tmp_path}/dev_api_key)" in text
    assert ".relay/" not in text
    assert text.removeprefix("export RELAY_PORT=8123\n") == dev.TRY_IT.replace(
        ".relay/", f"{tmp_path}/"
    )


def test_the_block_sets_only_known_relay_settings() -> None:
    # A RELAY_ variable relay does not know stops every relay command run from that shell.
    names = set(re.findall(r"\bRELAY_[A-Z_]+", dev.TRY_IT))
    assert names == {"RELAY_PORT"}
    load_settings(environ=dict.fromkeys(names, "8000"), dotenv=None)


@pytest.mark.timeout(900)
def test_the_readme_quick_start_on_a_fresh_clone(tmp_path: Path) -> None:
    # Deadlines a busy machine meets (another `make test` beside this one on two cores):
    # nothing here is a speed measure (`python -m bench quickstart` times it).
    run = run_quickstart(tmp_path, venv_from=Path(sys.prefix), up_timeout=300, notified_timeout=180)
    context = f"first terminal:\n{run.first}\n\nsecond terminal:\n{run.second}"

    # The receiver checked both signatures: it was given the secret and the public key.
    assert "(v1 secrets: 1, v1a keys: 1)" in run.second, context
    (processed,) = re.findall(r"processed (msg_\w+) batch=demo seq=1\n", run.second)
    assert "rejected" not in run.second and "duplicate" not in run.second, context

    # Delivered on the first attempt: the receiver was listening before anything was sent.
    assert len(run.deliveries) == 1, run.deliveries
    (delivery,) = run.deliveries
    assert delivery["id"] == processed
    assert delivery["status"] == "succeeded"
    assert [(a["number"], a["status_code"], a["error"]) for a in delivery["attempts"]] == [
        (1, 200, None)
    ]
    # The CSV went through: two rows.
    assert '"line_items":[{"sku":"A-100","qty":"2","unit_price":"9.90"}' in run.second, context

    # Ctrl-C in the second terminal stopped the receiver; nothing new in the clone's tree.
    assert run.second_exit is not None and run.receiver_stopped, context
    assert run.git_status == "", run.git_status
    # Ctrl-C in the first stopped relay dev, its private Redis included.
    assert run.first_exit is not None, context
    assert "stopping the private Redis" in run.first, context
