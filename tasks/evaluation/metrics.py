"""Evaluation metrics over scored rollouts: outcome flags, bootstrap intervals, pass@k, buckets, the decision.

Contract (pure functions, deterministic for a given bootstrap seed):
- ``outcome`` turns one verdict into flags; a flag is None where it does not apply to the env (no tool choice
  in math) or the verifier itself failed, and None values are left out of that rate.
- Intervals are 95% percentile bootstrap intervals over tasks (every sample of a resampled task comes along,
  so k samples of one task never count as k independent draws); latency percentiles resample rollouts.
- pass@k is the unbiased estimator 1 - C(n-c, k) / C(n, k) per task (n samples, c successes), averaged.
- Failure buckets: format_error, wrong_tool, wrong_args, unsafe_action, incomplete (episode cut off by its step
  or token budget, or no expected change made), wrong_result (well-formed but wrong: wrong answer, failing tests,
  wrong final state), verifier_error (the verifier could not score: never counted as reward 0).
"""

from __future__ import annotations

from math import comb
from typing import Any

import numpy as np
import polars as pl

from flywheel.schemas import Decision, FailureBucket, FailureExample, Metric, TaskPass, Thresholds, Verdict
from flywheel.verifiers.envs import env_names, get_env

BUCKETS = ("format_error", "wrong_tool", "wrong_args", "unsafe_action", "incomplete", "wrong_result", "verifier_error")
_BUCKET_OF = {"format_error": "format_error", "no_answer": "format_error", "ambiguous_answer": "format_error",
              "syntax_error": "format_error", "wrong_tool": "wrong_tool", "wrong_args": "wrong_args",
              "schema_violation": "wrong_args", "unsafe_action": "unsafe_action", "incomplete": "incomplete",
              "verifier_error": "verifier_error", "judge_failed": "verifier_error"}
RATES = ("success", "valid_output", "correct_tool", "correct_args", "execution_success", "unsafe")
RATE_NAMES = {"success": "success_rate", "valid_output": "valid_output_rate", "correct_tool": "correct_tool_rate",
              "correct_args": "correct_args_rate", "execution_success": "execution_success_rate",
              "unsafe": "unsafe_action_rate", "verifier_error": "verifier_error_rate"}


def bucket_of(verdict: Verdict, success: bool, stop_reason: str) -> str | None:
    if success:
        return None
    if not verdict.valid:
        return "verifier_error"
    if stop_reason in ("max_steps", "max_tokens") and verdict.failure_class != "unsafe_action":
        return "incomplete"
    return _BUCKET_OF.get(verdict.failure_class or "", "wrong_result")


def outcome(env: str, verdict: Verdict, success_threshold: float, stop_reason: str = "answer",
            tools_called: frozenset[str] = frozenset(),
            tools_expected: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Flags of one scored rollout (see the module contract)."""
    ok = verdict.valid and verdict.reward is not None
    success = ok and verdict.reward >= success_threshold  # type: ignore[operator]
    bucket = bucket_of(verdict, success, stop_reason)
    fc = verdict.failure_class
    flags: dict[str, Any] = {"success": success if ok else None, "bucket": bucket,
                             "valid_output": (bucket != "format_error") if ok else None,
                             "unsafe": (fc == "unsafe_action") if ok else None,
                             "correct_tool": None, "correct_args": None, "execution_success": None}
    if not ok:
        return flags
    extra = get_env(env).outcome_flags(verdict, tools_called, tools_expected) if env in env_names() else {}
    return flags | extra


def _interval(stats: np.ndarray) -> tuple[float, float]:
    lo, hi = np.nanpercentile(stats, [2.5, 97.5]) if np.isfinite(stats).any() else (np.nan, np.nan)
    return float(lo), float(hi)


def _clean(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 6)


class Bootstrap:
    """Task-level resampling indices, drawn once per (task count, seed) and shared by every metric."""

    def __init__(self, n_tasks: int, rounds: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.idx = rng.integers(0, n_tasks, size=(rounds, n_tasks)) if n_tasks else np.zeros((rounds, 0), int)
        self.rng = rng

    def ratio(self, sums: np.ndarray, counts: np.ndarray) -> Metric:
        total = counts.sum()
        if total == 0:
            return Metric(value=None, n=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats = sums[self.idx].sum(axis=1) / counts[self.idx].sum(axis=1)
        lo, hi = _interval(stats)
        return Metric(value=_clean(sums.sum() / total), lo=_clean(lo), hi=_clean(hi), n=int(total))

    def mean(self, values: np.ndarray) -> Metric:
        return self.ratio(values.astype(float), np.ones(len(values)))

    def quantile(self, values: np.ndarray, q: float, rounds: int) -> Metric:
        if len(values) == 0:
            return Metric(value=None, n=0)
        draws = values[self.rng.integers(0, len(values), size=(rounds, len(values)))]
        lo, hi = _interval(np.quantile(draws, q, axis=1))
        return Metric(value=_clean(np.quantile(values, q)), lo=_clean(lo), hi=_clean(hi), n=len(values))


def pass_at_k(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _per_task_sums(frame: pl.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    g = frame.group_by("task_id", maintain_order=True).agg(
        pl.col(column).cast(pl.Float64).sum().alias("s"), pl.col(column).is_not_null().sum().alias("c"))
    return g["s"].to_numpy(), g["c"].to_numpy().astype(float)


def summarize(frame: pl.DataFrame, k: int, rounds: int, seed: int, prices: tuple[float, float]) -> dict[str, Metric]:
    """Every metric of a set of rollouts (all of one eval, or one env's or tool's share) with its interval."""
    tasks = frame.group_by("task_id", maintain_order=True).agg(
        pl.col("success").cast(pl.Int64).sum().alias("c"), pl.col("success").is_not_null().sum().alias("n"))
    boot = Bootstrap(tasks.height, rounds, seed)
    out = {RATE_NAMES[name]: boot.ratio(*_per_task_sums(frame, name)) for name in RATES}
    errors = frame.with_columns((pl.col("bucket") == "verifier_error").fill_null(False).alias("verifier_error"))
    out["verifier_error_rate"] = boot.ratio(*_per_task_sums(errors, "verifier_error"))
    out["mean_reward"] = boot.ratio(*_per_task_sums(frame, "reward"))
    scored = tasks.filter(pl.col("n") > 0)
    boot_scored = Bootstrap(scored.height, rounds, seed)
    n, c = scored["n"].to_numpy(), scored["c"].to_numpy()
    out["pass@1"] = boot_scored.mean(c / np.maximum(n, 1)) if scored.height else Metric(value=None, n=0)
    kk = [pass_at_k(int(a), int(b), k) for a, b in zip(n, c) if a >= k]
    out[f"pass@{k}"] = boot_scored.mean(np.array(kk)) if len(kk) == scored.height and kk else Metric(value=None, n=0)
    latency = frame["latency_s"].to_numpy()
    out["latency_p50_s"] = boot.quantile(latency, 0.5, rounds)
    out["latency_p95_s"] = boot.quantile(latency, 0.95, rounds)
    out["prompt_tokens_mean"] = boot.ratio(*_per_task_sums(frame, "prompt_tokens"))
    out["completion_tokens_mean"] = boot.ratio(*_per_task_sums(frame, "completion_tokens"))
    cost = frame.with_columns(((pl.col("prompt_tokens") * prices[0] + pl.col("completion_tokens") * prices[1])
                               / 1000.0).alias("cost"))  # USD per 1k rollouts, from USD per 1M tokens
    out["cost_usd_per_1k_rollouts"] = boot.ratio(*_per_task_sums(cost, "cost"))
    return out


def per_task(frame: pl.DataFrame) -> pl.DataFrame:
    """Pass rate per task and its mark: always / never / mixed (solved in every, no, some samples)."""
    return (frame.group_by("task_id", "env", "tool", maintain_order=True)
            .agg(pl.len().alias("samples"), pl.col("success").cast(pl.Int64).sum().alias("successes"),
                 pl.col("reward").mean().alias("mean_reward"), pl.col("reward").std(ddof=0).alias("reward_std"),
                 (pl.col("reward").n_unique() == 1).alias("equal_rewards"))
            .with_columns((pl.col("successes") / pl.col("samples")).alias("pass_rate"))
            .with_columns(pl.when(pl.col("pass_rate") >= 1.0).then(pl.lit("always"))
                          .when(pl.col("successes") == 0).then(pl.lit("never")).otherwise(pl.lit("mixed"))
                          .alias("mark")))


def task_pass(table: pl.DataFrame) -> TaskPass:
    marks = dict(table.group_by("mark").len().rows())
    return TaskPass(always=marks.get("always", 0), never=marks.get("never", 0), mixed=marks.get("mixed", 0),
                    equal_rewards=int(table["equal_rewards"].sum()))


def buckets(frame: pl.DataFrame, examples: int = 3, width: int = 300) -> dict[str, FailureBucket]:
    total = max(frame.height, 1)
    out = {}
    for name in BUCKETS:
        part = frame.filter(pl.col("bucket") == name)
        classes = dict(sorted(part.group_by("failure_class").len().fill_null("none").rows()))
        shown = tuple(FailureExample(task_id=r["task_id"], sample=r["sample"], prompt=r["prompt"][:width],
                                     completion=r["completion"][:width], details=r["details"][:width])
                      for r in part.head(examples).iter_rows(named=True))
        out[name] = FailureBucket(count=part.height, share=round(part.height / total, 6), classes=classes,
                                  examples=shown)
    return out


def decide(metrics: dict[str, Metric], k: int, t: Thresholds) -> Decision:
    """SFT first when the format is rarely right (or never pays off), GRPO when success is inconsistent, done when
    the model already succeeds; numbers and thresholds are written into the reason."""
    valid, p1, pk = (metrics[m].value or 0.0 for m in ("valid_output_rate", "pass@1", f"pass@{k}"))
    if valid < t.sft_below_valid:
        return Decision(action="sft", thresholds=t, reason=(
            f"valid-output rate {valid:.1%} < {t.sft_below_valid:.0%}: the model rarely follows the output format; "
            "warm it up with SFT on the train split's reference answers, then run GRPO"))
    if pk < t.rl_min_pass_at_k:
        return Decision(action="sft", thresholds=t, reason=(
            f"pass@{k} {pk:.1%} < {t.rl_min_pass_at_k:.0%} although {valid:.1%} of outputs are well-formed: GRPO "
            "would have almost no successful samples to reinforce; SFT on reference answers first"))
    if p1 >= t.done_at_pass_at_1:
        return Decision(action="done", thresholds=t, reason=(
            f"pass@1 {p1:.1%} >= {t.done_at_pass_at_1:.0%}: the model already succeeds; training is not needed"))
    return Decision(action="rl", thresholds=t, reason=(
        f"valid-output rate {valid:.1%} and pass@{k} {pk:.1%} but pass@1 only {p1:.1%}: the model succeeds "
        "inconsistently; GRPO against the verifier"))
