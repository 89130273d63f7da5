"""A registered version's lineage as one JSON-ready dict (``flywheel registry show``).

Contract: :func:`lineage` returns the version's record plus where its files are, its aliases, whether its files
still match their hashes, its events and its ancestry (parent chain, e.g. GRPO <- SFT, cycle-safe).
"""

from __future__ import annotations

from typing import Any

from flywheel.tasks.release.registry import Registry


def ancestry(reg: Registry, version: Any) -> list[dict[str, Any]]:
    """The chain of parent versions, each with its training method, eval report and dataset version."""
    chain, seen = [], {version.id}
    while version.parent and version.parent not in seen:
        version = reg.version(version.parent)
        seen.add(version.id)
        report = reg.path(version) / version.eval_report if version.eval_report else None
        config = version.training.get("config")
        chain.append({"id": version.id, "name": version.name,
                      "method": config.get("method") if isinstance(config, dict) else None,
                      "eval_report": str(report) if report else None, "dataset": version.dataset.get("version")})
    return chain


def lineage(reg: Registry, version: Any) -> dict[str, Any]:
    """Everything ``registry show`` prints for ``version``."""
    base = reg.path(version)
    return {**version.model_dump(), "path": str(base), "adapter_path": str(base / version.adapter),
            "eval_report_path": str(base / version.eval_report) if version.eval_report else None,
            "aliases": [a for a, v in reg.aliases().items() if v == version.id],
            "files_intact": not reg.verify_files(version),
            "events": [e.model_dump() for e in reg.events() if e.version == version.id],
            "ancestry": ancestry(reg, version)}
