"""Checkpoint selection on a validation slice the gate never sees, and the flags of a training going wrong.

The validation slice is the last ``n`` train tasks by id (``train.load_tasks``; never trained on); the periodic
checks run on it (keys ``val_*``), so the gate's held-out tasks never choose a checkpoint. ``Best`` keeps the
checks that beat every earlier one, each with its adapter; ``drift_flags`` says what went wrong since the previous
check. The gate's paired test of GRPO against its SFT parent then decides which of the two is promoted.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from flywheel.tasks.files import share_tree, write_text_atomic
from flywheel.tasks.inference.models import UNREAD


class Best:
    """The validation checks that beat every earlier one, each with its adapter (``best-<step>/``), listed in
    ``best.json``; the last is the best. Earlier bests stay on disk, so a run resumed from a checkpoint before the
    latest best falls back to the best it had at that checkpoint, as the uninterrupted run did.

    ``keep(step, metrics, model)`` saves the adapter (a temp folder renamed in) and then lists it when its validation
    success, then its margin score (``val_margin``, ``margins.py``; the reward for a check without one), matches or
    beats the best so far: a small slice reads small held-out differences as success ties, and the margin score ranks
    them. The later checkpoint wins an exact tie, a lower score at equal success does not; training checks the start
    adapter first, as step 0 (``TrainLog``), so the start adapter is the result only when every later check reads below
    it. ``drop_after(step)`` forgets the bests from after the checkpoint a resumed run starts from;
    ``install(adapter)`` replaces the final adapter with the best one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        path = folder / "best.json"
        try:
            bests = json.loads(path.read_text(encoding="utf-8"))["bests"] if path.is_file() else []
            self.bests: list[dict[str, Any]] = [b for b in bests if self._dir(int(b["step"])).is_dir()]
            for b in self.bests:  # the scores keep() compares: numbers, or a check minutes in fails on them
                scores = [b["success"], b["reward"], *([b["margin"]] if "margin" in b else [])]
                if not all(type(v) in (int, float) for v in scores):
                    raise TypeError(f"step {b['step']} has a score that is not a number")
        except (ValueError, KeyError, TypeError) as exc:  # written atomically by us: only a hand edit breaks it
            raise ValueError(f"{path} is not a checkpoint-selection record ({type(exc).__name__}: {exc}); delete "
                             f"it and the best-<step>/ folders beside it to select again from the next check, "
                             f"or train into a fresh --out") from None

    def _dir(self, step: int) -> Path:
        return self.folder / f"best-{step}"

    @property
    def record(self) -> dict[str, Any] | None:
        return self.bests[-1] if self.bests else None

    def _write(self) -> None:
        write_text_atomic(self.folder / "best.json", json.dumps({"bests": self.bests}) + "\n")

    def drop_after(self, step: int) -> None:
        """A resumed run starts from checkpoint ``step``: the bests recorded after it are not this run's."""
        later = [b for b in self.bests if b["step"] > step]
        self.bests = [b for b in self.bests if b["step"] <= step]
        self._write()
        for b in later:
            shutil.rmtree(self._dir(b["step"]), ignore_errors=True)

    def keep(self, step: int, metrics: dict[str, float], model: Any) -> bool:
        key = "margin" if "val_margin" in metrics else "reward"  # success ties: the smooth score (margins.py)
        score = (metrics["val_success"], metrics[f"val_{key}"])
        if self.record and score < (self.record["success"], self.record.get(key, float("-inf"))):
            return False  # a tie goes to the later checkpoint
        tmp = Path(tempfile.mkdtemp(prefix=".best-tmp-", dir=self.folder))
        try:
            model.save_pretrained(str(tmp), selected_adapters=["default"])  # not TRL's frozen "ref" copy
            share_tree(tmp)
            shutil.rmtree(self._dir(step), ignore_errors=True)  # left by a run killed before it wrote best.json
            os.replace(tmp, self._dir(step))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.bests.append({"step": step, "success": score[0], "reward": metrics["val_reward"],
                           **({"margin": metrics["val_margin"]} if key == "margin" else {})})
        self._write()  # the record comes last: best.json never names an adapter that is not whole
        return True

    def install(self, adapter: Path, start: Path | None = None) -> int | None:
        """Copy the best adapter's files over ``adapter`` (the config and tokenizer files stay); its step. Step 0
        with ``start`` (the adapter training started from): ``adapter`` becomes the start adapter's own files, byte
        for byte (a trainer's save of the same weights may write its files otherwise), so an eval of it is an eval of
        the start adapter (``EvalConfig.reuse`` finds its batches); the trainer's card and arguments stay. A start
        folder holding a link gets step 0's own save (its eval then runs its batches)."""
        if self.record is None:
            return None
        step = int(self.record["step"])
        # a link in start could name any file: its target is never copied in (step 0's own save is installed)
        if step == 0 and start is not None and not any(f.is_symlink() for f in start.iterdir()):
            for stale in [f for f in adapter.iterdir() if f.is_file() and f.name not in UNREAD]:
                stale.unlink()
            sources = [f for f in start.iterdir() if f.is_file() and f.name[0] != "." and f.name not in UNREAD]
        else:
            sources = list(self._dir(step).iterdir())
        for src in sources:
            tmp = adapter / f".{src.name}.tmp"
            shutil.copyfile(src, tmp)
            os.replace(tmp, adapter / src.name)
        return step


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return sum(values) / len(values) if values else None


def _ends(rows: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    """``key``'s mean over the first and the last quarter (at least one) of the rows that have it: a check-only row
    (the start adapter's, step 0) is not a training step."""
    have = [r for r in rows if isinstance(r.get(key), int | float)]
    n = max(1, len(have) // 4)
    return _mean(have[:n], key), _mean(have[-n:], key)


def _reward_windows(rows: list[dict[str, Any]], prev: int) -> tuple[float | None, float | None]:
    """The training reward before and since the check at ``prev``; when that check is the start (no training step
    before it), the first and second halves of the steps since, so the first check after the start can flag too."""
    earlier = [r for r in rows[:prev + 1] if isinstance(r.get("reward"), int | float)]
    since = [r for r in rows[prev + 1:] if isinstance(r.get("reward"), int | float)]
    if not earlier:
        earlier, since = since[:len(since) // 2], since[len(since) // 2:]
    return _mean(earlier, "reward"), _mean(since, "reward")


def drift_flags(rows: list[dict[str, Any]], at_end: bool = False) -> list[dict[str, Any]]:
    """At a check row (validation, or held-out without a validation slice) and at the last step (``at_end``, so a run
    without checks is flagged too), what went wrong since the previous check or the first step, each flag
    ``{"flag", "step", "detail"}``: ``reward_up_validation_down`` (the training reward rose while validation success
    fell; after the start's own check, step 0, the first half of the steps since against the second),
    ``length_blowup`` (mean completion length more than doubled since the first training steps; a check-only row is no
    step), ``format_drift`` (the invalid-output rate rose by more than 0.1 on the checks or 0.2 in training)."""
    last = rows[-1]
    prefix = "val" if "val_success" in last else "heldout" if "heldout_success" in last else None
    if prefix is None and not at_end:
        return []
    step, flags = last["step"], []
    checks = [i for i, r in enumerate(rows) if f"{prefix}_success" in r] if prefix else []
    if prefix == "val" and len(checks) > 1:  # validation only: the gate's held-out tasks never steer training
        prev = checks[-2]
        before, since = _reward_windows(rows, prev)
        fell = last["val_success"] < rows[prev]["val_success"]
        if before is not None and since is not None and since > before and fell:
            flags.append({"flag": "reward_up_validation_down", "step": step, "detail": (
                f"training reward {before:.3f} -> {since:.3f} while validation success "
                f"{rows[prev]['val_success']:.3f} -> {last['val_success']:.3f}")})
    start, now = _ends(rows, "completions/mean_length")
    if start and now and now > 2 * start:
        flags.append({"flag": "length_blowup", "step": step,
                      "detail": f"mean completion length {start:.1f} -> {now:.1f} tokens"})
    key = f"{prefix}_invalid_rate"
    first_check = rows[checks[0]] if checks else {}
    check_rise = last.get(key, 0) - first_check.get(key, 0)
    start, now = _ends(rows, "train_invalid_rate")
    if check_rise > 0.1 or (start is not None and now is not None and now - start > 0.2):
        flags.append({"flag": "format_drift", "step": step, "detail": (
            f"{'validation' if prefix == 'val' else 'held-out'} invalid-output rate {first_check.get(key, 0):.3f} -> "
            f"{last.get(key, 0):.3f}; training {start} -> {now}")})
    return flags
