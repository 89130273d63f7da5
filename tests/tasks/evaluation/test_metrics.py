"""Evaluation metrics: pass@k, task-level bootstrap intervals, outcome flags from real verdicts, the decision,
and the report written from scored rollouts (no model needed)."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import polars as pl
import pytest

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import make_report, write_outputs
from flywheel.schemas import EvalReport, Metric, Thresholds, Verdict
from flywheel.tasks.data.seeds import seed_task
from flywheel.tasks.data.validate import reference_completion
from flywheel.tasks.evaluation.metrics import Bootstrap, decide, outcome, pass_at_k, summarize
from flywheel.tasks.evaluation.rollouts import ROLLOUT_SCHEMA, _row, plan
from flywheel.verifiers.envs.tool_call import tool_call


@pytest.mark.parametrize(("n", "c", "k"), [(5, 0, 1), (5, 2, 1), (5, 2, 3), (6, 1, 6), (4, 4, 2), (8, 3, 4)])
def test_pass_at_k_is_the_chance_that_k_of_n_samples_hold_a_success(n: int, c: int, k: int) -> None:
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(combinations(outcomes, k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_bootstrap_resamples_tasks_not_samples() -> None:
    rng = np.random.default_rng(0)
    per_task = rng.random(40) < 0.4
    one = Bootstrap(40, 2000, seed=1).ratio(per_task.astype(float), np.ones(40))
    # the same outcome copied into 8 samples per task is not 8x the evidence: the interval must not shrink
    eight = Bootstrap(40, 2000, seed=1).ratio(per_task.astype(float) * 8, np.full(40, 8.0))
    assert one.lo < one.value < one.hi and (one.lo, one.hi) == (eight.lo, eight.hi)
    assert Bootstrap(40, 2000, seed=1).ratio(per_task.astype(float), np.ones(40)) == one  # seeded: deterministic
    wide = Bootstrap(10, 2000, seed=1).ratio(per_task[:10].astype(float), np.ones(10))
    assert wide.hi - wide.lo > one.hi - one.lo


def test_outcome_flags_and_buckets_come_from_real_verdicts(catalog) -> None:
    tools, seeds = catalog
    task = seed_task(next(s for s in seeds if s.category != "refuse" and s.call), tools)
    expected = task.reference.calls[0]
    other = next(t for t in task.tools if t.name != expected.tool and t.safety != "destructive")
    cases = {
        reference_completion(task): (True, None, True, True, True),
        "Sure! Here is the call.": (False, "format_error", False, False, False),
        json.dumps({"tool": other.name, "args": {}}): (False, "wrong_tool", True, False, None),
        json.dumps({"tool": expected.tool, "args": {}}): (False, "wrong_args", True, True, False),
    }
    for completion, (success, bucket, valid, right_tool, right_args) in cases.items():
        flags = outcome("tool_call", tool_call.verify(task, completion), 1.0)
        assert (flags["success"], flags["bucket"], flags["valid_output"], flags["correct_tool"]) == \
            (success, bucket, valid, right_tool), completion
        if right_args is not None:
            assert flags["correct_args"] is right_args
    broken = Verdict(reward=None, valid=False, failure_class="verifier_error", verifier="tool_call")
    flags = outcome("tool_call", broken, 1.0)
    assert flags["bucket"] == "verifier_error" and flags["success"] is None and flags["valid_output"] is None
    incomplete = Verdict(reward=0.5, valid=True, failure_class="wrong_state", components={"tool_errors": 0})
    assert outcome("workplace", incomplete, 1.0, "max_steps")["bucket"] == "incomplete"


def _metrics(valid: float, p1: float, pk: float) -> dict[str, Metric]:
    return {"valid_output_rate": Metric(value=valid, n=10), "pass@1": Metric(value=p1, n=10),
            "pass@4": Metric(value=pk, n=10)}


def test_decision_follows_the_thresholds() -> None:
    t = Thresholds(sft_below_valid=0.5, rl_min_pass_at_k=0.05, done_at_pass_at_1=0.9)
    assert decide(_metrics(0.2, 0.1, 0.3), 4, t).action == "sft"
    never = decide(_metrics(0.95, 0.0, 0.0), 4, t)
    assert never.action == "sft" and "pass@4" in never.reason
    assert decide(_metrics(0.9, 0.4, 0.7), 4, t).action == "rl"
    done = decide(_metrics(0.99, 0.95, 1.0), 4, t)
    assert done.action == "done" and "95.0%" in done.reason and done.thresholds == t


def _scored_rows(catalog) -> list[dict]:
    """Two tasks x 3 samples: task A always right, task B right once; scored by the real verifier."""
    tools, seeds = catalog
    tasks = [seed_task(s, tools) for s in seeds if s.call][:2]
    rows = []
    for (ti, sample, seed) in plan([t.id for t in tasks], 3, run_seed=5):
        task = tasks[ti]
        text = reference_completion(task) if ti == 0 or sample == 0 else "no idea"
        verdict = tool_call.verify(task, text)
        rows.append(_row(task, task.reference.calls[0].tool, sample, seed, text, verdict, 0.1 * (sample + 1),
                         (100, 20), "stop", 1, outcome(task.env, verdict, 1.0)))
    return rows


def test_report_from_scored_rollouts(tmp_path, catalog) -> None:
    frame = pl.DataFrame(_scored_rows(catalog), schema=ROLLOUT_SCHEMA)
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "manifest.json").write_text("{}")
    config = EvalConfig(dataset=str(tmp_path / "ds"), out=str(tmp_path / "out"), samples=3, price_in=1.0,
                        price_out=2.0)
    dataset = {"name": "tool_call", "version": "v-x", "content_hash": "0" * 64, "path": "ds"}
    model = {"ref": "embedded", "backend": "transformers", "model_id": "m", "hash": "h"}
    report = make_report(config, frame, dataset, model, {"tool_call": "1.0.0"}, {"total": 1, "reused": 0, "run": 1},
                         {})
    m = report.metrics
    assert m["pass@1"].value == pytest.approx((1 + 1 / 3) / 2) and m["pass@3"].value == 1.0
    assert m["valid_output_rate"].value == pytest.approx(4 / 6) and m["success_rate"].n == 6
    assert m["cost_usd_per_1k_rollouts"].value == pytest.approx((100 * 1.0 + 20 * 2.0) / 1000)
    assert report.task_pass.always == 1 and report.task_pass.mixed == 1
    assert report.failure_buckets["format_error"].count == 2 and report.failure_buckets["format_error"].examples
    assert set(report.per_tool) == set(frame["tool"].unique()) and set(report.per_env) == {"tool_call"}
    (tmp_path / "out").mkdir()
    write_outputs(tmp_path / "out", report, frame)
    saved = EvalReport.model_validate_json((tmp_path / "out" / "report.json").read_text())
    assert saved.metrics == report.metrics and saved.files["metrics_plot"] == "metrics.png"
    for name in ("metrics.png", "failures.png", "rewards.png"):
        assert (tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG"
    md = (tmp_path / "out" / "report.md").read_text()
    assert "![metrics](metrics.png)" in md and "Decision" in md and "format_error" in md
    assert pl.read_parquet(tmp_path / "out" / "per_task.parquet").height == 2


def test_summarize_is_deterministic(catalog) -> None:
    frame = pl.DataFrame(_scored_rows(catalog), schema=ROLLOUT_SCHEMA)
    assert summarize(frame, 3, 500, 1, (0, 0)) == summarize(frame, 3, 500, 1, (0, 0))
