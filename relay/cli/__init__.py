"""``relay``: one command, one sub-command per process or operator command."""

from relay.cli.commands import main

__all__ = ["main"]
