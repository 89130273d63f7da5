"""The ``flywheel`` command line: the typer app (``base``) and one module per command group.

Modules: ``data`` (generate, ingest, dedupe), ``evaluate`` (eval, score, profile-reward), ``train`` (train, run),
``release`` (promote, rollback, registry), ``serve`` (serve, serve-env); ``jsonl`` is the JSONL edge. Each command
checks its options, calls a flow or a task function and prints the result; exit codes are ``base``'s.
The console script is ``flywheel = "flywheel.flows.cli:main"``; ``python -m flywheel.flows.cli`` runs the same.
"""

from __future__ import annotations

from flywheel.flows.cli import data, evaluate, release, serve, train  # noqa: F401  (each registers its commands)
from flywheel.flows.cli.base import app

__all__ = ["app", "main"]


def main() -> None:
    app(prog_name="flywheel")
