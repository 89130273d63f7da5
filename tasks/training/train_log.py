"""What a training run reports while it runs: per-step rewards and flags, step time, periodic held-out metrics.

Contract:
- ``heldout_metrics(model, tokenizer, tasks, ...)`` samples the model being trained on held-out (or validation)
  tasks (one sample each, ``flywheel eval``'s rollout seeds; on ``engine``, the rollouts' vLLM engine, when given)
  and returns reward, success, invalid-output and unsafe-action rates, keyed ``PREFIX_*``.
- ``TrainLog`` is a ``transformers.TrainerCallback`` that appends one JSON line per optimizer step to a file:
  step, step time (for GRPO split into ``rollout_s``, generation and environment, and ``update_s``, the rest), the
  trainer's own logs (loss, reward, the invalid and unsafe shares the env's reward function logs), and every
  ``interval`` steps and at the last step (never with interval 0) the held-out or validation metrics; with ``best``
  (``selection.Best``) a validation check that matches or beats the best so far saves the adapter
  (``"best": true``), and a check row, and the last step's row, carry the ``flags`` of ``selection.drift_flags``.
  With ``best``, the start policy is checked first, as step 0, so "every training step read below the start" can
  keep it. ``notify`` (e.g. a Prefect logger) gets each line too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from flywheel.schemas import Task
from flywheel.tasks.files import write_text_atomic


def heldout_metrics(model: Any, tokenizer: Any, tasks: list[Task], seed: int, max_tokens: int,
                    threshold: float, temperature: float = 0.7, prefix_cache: bool = True,
                    max_steps: int = 1, prefix: str = "heldout", engine: Any = None) -> dict[str, float]:
    from flywheel.tasks.evaluation.rollouts import rollout_seed, run_batch
    from flywheel.tasks.inference.hf import HFChatModel
    from flywheel.tasks.inference.policy import Sampling, TransformersBackend

    items = [(t, "", 0, rollout_seed(seed, t.id, 0)) for t in tasks]
    sampling = Sampling(temperature, 0.95, max_tokens)
    if engine is not None:  # the rollouts' vLLM engine, synced to the model's weights
        return check_rates(run_batch(engine, items, sampling, threshold, max_steps), prefix)
    was_training = model.training
    model.eval()
    try:
        backend = TransformersBackend(None, batch_size=8, loaded=HFChatModel.wrap(model, tokenizer, Path("training"),
                                                                                   prefix_cache=prefix_cache))
        rows = run_batch(backend, items, sampling, threshold, max_steps)
    finally:
        model.train(was_training)
    return check_rates(rows, prefix)


def check_rates(rows: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    """A check's rates from its rollout rows, read with the eval files' schema (inferred from the first 100 rows, a
    failure first seen after them failed the check)."""
    import polars as pl

    from flywheel.tasks.evaluation.rollouts import ROLLOUT_SCHEMA

    frame = pl.DataFrame(rows, schema=ROLLOUT_SCHEMA)

    def rate(column: str) -> float:
        mean = frame[column].cast(pl.Float64).mean()
        return round(float(mean) if isinstance(mean, int | float) else 0.0, 4)

    return {f"{prefix}_reward": rate("reward"), f"{prefix}_success": rate("success"),
            f"{prefix}_invalid_rate": round(1 - rate("valid_output"), 4), f"{prefix}_unsafe_rate": rate("unsafe")}


class TrainLog(TrainerCallback):
    def __init__(self, path: Path, heldout: Callable[[Any, int], dict[str, Any]], interval: int,
                 counters: Sequence[Any] = (), notify: Callable[[dict[str, Any]], None] | None = None,
                 best: Any = None) -> None:
        self.path, self.heldout, self.interval, self.notify, self.best = path, heldout, interval, notify, best
        self.counters = list(counters)  # objects whose take() gives the step's counts (rewards, rollout seconds)
        self.row: dict[str, Any] | None = None
        self.at_end = False
        self.t0 = time.perf_counter()
        self.rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """With checkpoint selection, check the start policy first (step 0): when every later checkpoint reads below
        it on the validation slice, the start adapter is the result (no training step helped). A resumed run has
        its row."""
        if self.best is None or not self.interval or any(r.get("step") == 0 for r in self.rows):
            return
        self._write({"step": 0, **self._check(0, model)})

    def _check(self, step: int, model: Any) -> dict[str, Any]:
        """The held-out or validation metrics now; a validation check that matches or beats the best so far saves
        the adapter."""
        t0 = time.perf_counter()
        checks = self.heldout(model, step)
        row = checks | {"heldout_eval_s": round(time.perf_counter() - t0, 3)}
        if self.best is not None and "val_success" in checks:  # checkpoint selection on the validation slice
            row["best"] = self.best.keep(step, checks, model)
        return row

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.t0 = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        step = state.global_step
        self.row = {"step": step, "step_time_s": round(time.perf_counter() - self.t0, 3)}
        self.at_end = step >= state.max_steps
        for counter in self.counters:
            self.row |= counter.take()
        if "rollout_s" in self.row:  # the rest of the step: rewards, log-probs, backward, optimizer
            self.row["update_s"] = round(self.row["step_time_s"] - self.row["rollout_s"], 3)
        if self.interval and (step % self.interval == 0 or step >= state.max_steps):
            self.row |= self._check(step, model)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.row is None:  # the trainer's end-of-training summary: not a step
            return
        keep = {k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}
        line, self.row = {**keep, **self.row}, None
        from flywheel.tasks.training.selection import drift_flags

        flags = drift_flags([*self.rows, line], self.at_end)
        if flags:
            line["flags"] = flags
        self._write(line)

    def _write(self, line: dict[str, Any]) -> None:
        self.rows.append(line)
        with self.path.open("a", encoding="utf-8") as fh:  # one whole line per step; a resumed run trims the tail
            fh.write(json.dumps(line) + "\n")
        if self.notify:
            self.notify(line)


def trim_log(path: Path, last_step: int) -> None:
    """Drop lines of steps after ``last_step`` (the checkpoint a resumed run starts from) and any torn last line."""
    if not path.is_file():
        return
    kept = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            continue  # a line torn by a kill
        if row.get("step", 0) <= last_step:
            kept.append(text)
    write_text_atomic(path, "".join(t + "\n" for t in kept))
