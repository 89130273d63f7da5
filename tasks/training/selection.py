"""Checkpoint selection on a validation slice the gate never sees, and the flags of a training going wrong.

Contract:
- ``validation_split(frame, n)``: the last ``n`` train tasks by id are the validation slice (never trained on); the
  periodic checks run on them (keys ``val_*``), so the gate's held-out tasks never choose a checkpoint.
- ``Best(folder)``: ``keep(step, metrics, model)`` saves the model's adapter to ``folder/best-adapter`` (a temp
  folder renamed in) and then ``folder/best.json`` when its validation success (then reward) beats the best so far;
  ``drop_after(step)`` forgets a best from after the checkpoint a resumed run starts from; ``install(adapter)``
  replaces the final adapter with the best one. The earliest checkpoint wins a tie.
- ``drift_flags(rows)``: at the last check row, what went wrong since the previous check or the first step:
  ``reward_up_validation_down`` (the training reward rose while validation success fell), ``length_blowup`` (mean
  completion length more than doubled since the first steps), ``format_drift`` (the invalid-output rate rose by more
  than 0.1 on the checks or 0.2 in training). Each flag is ``{"flag", "step", "detail"}``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from flywheel.tasks.files import write_text_atomic


class Best:
    def __init__(self, folder: Path) -> None:
        self.folder, self.record = folder, None
        if (folder / "best.json").is_file() and (folder / "best-adapter").is_dir():
            self.record = json.loads((folder / "best.json").read_text(encoding="utf-8"))

    def drop_after(self, step: int) -> None:
        if self.record and self.record["step"] > step:
            self.record = None
            (self.folder / "best.json").unlink(missing_ok=True)

    def keep(self, step: int, metrics: dict[str, float], model: Any) -> bool:
        score = (metrics["val_success"], metrics["val_reward"])
        if self.record and score <= (self.record["success"], self.record["reward"]):
            return False
        tmp = Path(tempfile.mkdtemp(prefix=".best-tmp-", dir=self.folder))
        try:
            model.save_pretrained(str(tmp))
            (self.folder / "best.json").unlink(missing_ok=True)  # never a record naming another step's adapter
            shutil.rmtree(self.folder / "best-adapter", ignore_errors=True)
            os.replace(tmp, self.folder / "best-adapter")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.record = {"step": step, "success": score[0], "reward": score[1]}
        write_text_atomic(self.folder / "best.json", json.dumps(self.record) + "\n")
        return True

    def install(self, adapter: Path) -> int | None:
        """Copy the best adapter's files over ``adapter`` (the config and tokenizer files stay); its step."""
        if self.record is None:
            return None
        for src in (self.folder / "best-adapter").iterdir():
            tmp = adapter / f".{src.name}.tmp"
            shutil.copyfile(src, tmp)
            os.replace(tmp, adapter / src.name)
        return int(self.record["step"])


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return sum(values) / len(values) if values else None


def drift_flags(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    checks = [i for i, r in enumerate(rows) if "val_success" in r]
    if not checks or checks[-1] != len(rows) - 1:
        return []
    last, step, flags = rows[-1], rows[-1]["step"], []
    prev = checks[-2] if len(checks) > 1 else None
    if prev is not None:
        before, since = _mean(rows[:prev + 1], "reward"), _mean(rows[prev + 1:], "reward")
        fell = last["val_success"] < rows[prev]["val_success"]
        if before is not None and since is not None and since > before and fell:
            flags.append({"flag": "reward_up_validation_down", "step": step, "detail": (
                f"training reward {before:.3f} -> {since:.3f} while validation success "
                f"{rows[prev]['val_success']:.3f} -> {last['val_success']:.3f}")})
    first_n = max(1, len(rows) // 4)
    start, now = _mean(rows[:first_n], "completions/mean_length"), _mean(rows[-first_n:], "completions/mean_length")
    if start and now and now > 2 * start:
        flags.append({"flag": "length_blowup", "step": step,
                      "detail": f"mean completion length {start:.1f} -> {now:.1f} tokens"})
    first_check = rows[checks[0]]
    val_rise = last.get("val_invalid_rate", 0) - first_check.get("val_invalid_rate", 0)
    start, now = _mean(rows[:first_n], "train_invalid_rate"), _mean(rows[-first_n:], "train_invalid_rate")
    if val_rise > 0.1 or (start is not None and now is not None and now - start > 0.2):
        flags.append({"flag": "format_drift", "step": step, "detail": (
            f"validation invalid-output rate {first_check.get('val_invalid_rate', 0):.3f} -> "
            f"{last.get('val_invalid_rate', 0):.3f}; training {start} -> {now}")})
    return flags
