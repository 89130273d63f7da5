"""What a training run writes and owns: its checkpoints (the last complete one resumed), the adapter saved
atomically, the checks on OUT and the registry before training, and the claim (``train_config.json``) that OUT
belongs to one config."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from flywheel.tasks.files import changed_options, check_destination, read_claim, share_tree, write_text_atomic
from flywheel.tasks.training.config import GRPO_ONLY, RENAMED, TrainConfig


def checkpoint_complete(ckpt: Path) -> bool:
    """Transformers writes a checkpoint's trainer_state.json after its weights and optimizer, in place: a run killed
    mid-save leaves it missing, empty or cut."""
    try:
        json.loads((ckpt / "trainer_state.json").read_text())
        return True
    except (OSError, ValueError):
        return False


def last_checkpoint(folder: Path) -> str | None:
    """The latest complete checkpoint; one killed mid-save is skipped (resuming from it crashed on its state file)."""
    ckpts = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])) if folder.is_dir() else []
    return next((str(c) for c in reversed(ckpts) if checkpoint_complete(c)), None)


def save_adapter(trainer: Any, out: Path, best: Any = None, start: Path | None = None) -> tuple[Path, int | None]:
    """Save to a unique temp folder (with the best checkpoint's weights when ``best`` has one; the files of
    ``start``, the start adapter, when that is the best), then rename it in; a failed save leaves no temp folder
    behind. Returns the adapter and the step it was selected at (None: last)."""
    for stale in out.glob(".adapter-tmp*"):  # a killed earlier save of this OUT (which one config owns)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".adapter-tmp-", dir=out))
    target = out / "adapter"
    try:
        trainer.save_model(str(tmp))
        selected = best.install(tmp, start) if best is not None else None
        shutil.rmtree(tmp / "ref", ignore_errors=True)  # TRL's frozen copy of the start adapter (beta > 0): not ours
        share_tree(tmp)  # mkdtemp and safetensors make it private; the adapter is read like any output
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target, selected


def check_train_paths(out: Path, start: Path, registry: Path | None, parent: str | None) -> None:
    """Before training (the CLI, and ``train_policy`` itself: a deployment run skips the CLI): OUT lies outside
    published versions and registries and does not hold the start adapter (the new adapter/ replaces
    OUT/adapter); the registry is usable now, not found damaged after training: one that reads whole (and knows
    --parent), or a new or empty folder, never a file, one inside a published version, or OUT's folder. ValueError."""
    from flywheel.tasks.release.registry import Registry

    check_destination(out, "--out")
    here = out.resolve()
    if start.resolve() == here or here in start.resolve().parents:
        raise ValueError(f"--out {out} holds the --model adapter {start}: training writes OUT/adapter and would "
                         "destroy its own input; choose another --out")
    if registry is None:
        if parent:
            raise ValueError(f"--parent {parent} names a registry version: pass --registry too")
        return
    check_destination(registry, "--registry", registry_ok=True)
    if registry.resolve() == here or registry.resolve() in here.parents:
        raise ValueError(f"--out {out} is inside --registry {registry}: a registry holds registered versions "
                         "only; choose an --out outside it")
    if here in registry.resolve().parents:  # training replaces OUT/adapter, rotates OUT/checkpoints
        raise ValueError(f"--registry {registry} is inside --out {out}: training writes and replaces folders there; "
                         "choose a registry outside OUT")
    reg = Registry(registry)
    if reg.exists():
        reg.events()  # a damaged log is one line now
        if parent:
            reg.version(parent)  # so is an unknown --parent (it would only fail at registration, after training)
    elif registry.exists() and not registry.is_dir():
        raise ValueError(f"--registry {registry} is a file; name a folder")
    elif registry.is_dir() and any(registry.iterdir()):
        raise ValueError(f"--registry {registry} is a folder of other files, not a model registry: name an existing "
                         "registry or a new folder")
    elif parent:
        raise ValueError(f"--parent {parent}: there is no registry at {registry} yet to hold it")


def check_claim(out: Path, config: TrainConfig) -> None:
    """OUT belongs to one config: resuming checkpoints of another run would silently mix two trainings (options SFT
    never reads, ``GRPO_ONLY``, do not make an SFT run another). Run by the CLI before any flow, and again by
    ``train``. ValueError: OUT holds another run, or a train_config.json that is
    not one (a FIFO, a link, not a JSON object: one line, never a hang)."""
    found = read_claim(out / "train_config.json", "a training run's config")
    if found is None:
        return
    found = {RENAMED.get(k, k): v for k, v in found.items()}
    if changed_options(found, config, GRPO_ONLY if config.method == "sft" else frozenset()):
        raise ValueError(f"{out} holds a training run with other options; rerun with the same options to resume it, "
                         "or pass a new --out")


def claim(out: Path, config: TrainConfig) -> None:
    check_claim(out, config)
    write_text_atomic(out / "train_config.json", json.dumps(config.model_dump(mode="json"), indent=2) + "\n")
