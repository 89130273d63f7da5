"""An OUT belongs to one ``flywheel run``: its options are recorded in OUT/run_config.json once the dataset is
published, and a rerun into OUT with other options is refused before any stage (``check_run_claim``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flywheel.flows.config import RunConfig
from flywheel.tasks.files import changed_options, read_claim

CLAIM = "run_config.json"  # the options OUT's run was started with (check_run_claim)
# where the work runs, not what it makes (and OUT itself, however it is spelled)
UNCLAIMED = frozenset({"out", "workers", "dask_address", "gpu_pool"})
RENAMED = {"grpo_replay": "grpo_replay_weight"}  # options renamed since runs recorded them


def _recorded(old: dict[str, Any], key: str) -> str:
    """An option's recorded value for a message; one the run did not record (it predates the option) ran as the
    option's default, which is what to pass (review probe: "(not recorded)" named no value to rerun with)."""
    if key in old:
        return json.dumps(old[key])
    field = RunConfig.model_fields.get(key)
    known = field is not None and not field.is_required()
    return f"not recorded (its default {json.dumps(field.default)})" if known else "not recorded"


def check_run_claim(config: RunConfig) -> None:
    """OUT belongs to one set of options: a rerun into it reuses its stages (the dataset, evals, adapters, each
    checked by its own stage), so another option would fail only at the stage it changes, after the cached ones ran.
    Run by the CLI before the flow and by ``run_pipeline`` before any stage. Where the work runs (``UNCLAIMED``) may
    change; an option added since the run was recorded reads as its default. The record is OUT/run_config.json, or
    for a run made before it was written, the config its summary.json holds. ValueError naming each changed option."""
    out, what = Path(config.out), "a flywheel run's record"
    saved, old = out / CLAIM, read_claim(out / CLAIM, what)
    if old is None:
        saved, summary = out / "summary.json", read_claim(out / "summary.json", what)
        old = summary and summary.get("config")
        if summary is not None and not isinstance(old, dict):
            raise ValueError(f"{saved} is not {what} (no config object): pass a new --out")
    if old is None:
        return
    old = {RENAMED.get(k, k): v for k, v in old.items()}  # a run recorded before an option's rename: the same run
    mine = config.model_dump(mode="json")
    changed = changed_options(old, config, UNCLAIMED)
    if changed:
        differences = ", ".join(f"--{k.replace('_', '-')} {_recorded(old, k)} there, "
                                f"{json.dumps(mine.get(k, '(not an option)'))} now" for k in changed)
        raise ValueError(f"{out} holds a flywheel run with other options ({differences}; recorded in "
                         f"{saved.name}): rerun with its values to resume it, or pass a new --out")
