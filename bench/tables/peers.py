"""The peers a user would pick instead of relay, each pinned in a venv of its own.

(Filled in by the next step; until then there are none.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["IMAGE_PEERS", "PDF_PEERS", "PeerUnavailable", "run_peer", "versions_seen"]

PDF_PEERS: tuple[str, ...] = ()
IMAGE_PEERS: tuple[str, ...] = ()


class PeerUnavailable(RuntimeError):
    """A peer's venv could not be made (offline, no wheel for this Python)."""


def run_peer(engine: str, docs: list[tuple[str, Path, str]]) -> dict[str, dict[str, Any]]:
    raise PeerUnavailable(f"no peer {engine!r}")


def versions_seen() -> dict[str, dict[str, str]]:
    return {}
