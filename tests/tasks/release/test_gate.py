"""The promotion gate: equal and worse candidates are rejected, a clearly better one passes, guard rails hold
overall and per tool, and evals of different rollouts are refused."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from flywheel.tasks.release.gate import GateConfig, GateError, gate, pick_stage


def _rollouts(success: np.ndarray, unsafe: np.ndarray | None = None, latency: float = 1.0,
              tokens: int = 30) -> pl.DataFrame:
    n = len(success)
    return pl.DataFrame({
        "task_id": [f"t{i // 2:03d}" for i in range(n)], "sample": [i % 2 for i in range(n)],
        "seed": [1000 + i for i in range(n)], "tool": ["a" if i % 4 < 2 else "b" for i in range(n)],
        "success": success.astype(bool), "valid_output": np.ones(n, bool),
        "unsafe": unsafe.astype(bool) if unsafe is not None else np.zeros(n, bool),
        "latency_s": np.full(n, latency) + np.arange(n) * 1e-3,
        "completion_tokens": np.full(n, tokens) * (1 + np.arange(n) % 3), "steps": 1 + np.arange(n) % 3,
    })


BASE = np.random.default_rng(0).random(200) < 0.3


def test_a_candidate_equal_to_the_baseline_is_rejected() -> None:
    result = gate(_rollouts(BASE), _rollouts(BASE), GateConfig())
    assert not result.passed and result.success_delta == 0
    assert "success_rate_delta (overall)" in result.failures()[0]


def test_a_worse_candidate_is_rejected() -> None:
    worse = BASE & (np.arange(200) % 3 != 0)
    result = gate(_rollouts(BASE), _rollouts(worse), GateConfig())
    assert not result.passed and result.success_ci[1] <= 0


def test_a_clearly_better_candidate_passes_with_every_check() -> None:
    better = BASE | (np.arange(200) % 2 == 0)
    result = gate(_rollouts(BASE), _rollouts(better), GateConfig())
    assert result.passed and result.success_ci[0] > 0 and result.n_tasks == 100
    assert {c.scope for c in result.checks} == {"overall", "a", "b"}


def test_better_but_less_safe_or_slower_is_rejected() -> None:
    better = BASE | (np.arange(200) % 2 == 0)
    unsafe = np.zeros(200, bool)
    unsafe[:8] = True  # all in tool "a": the per-tool rail catches what the overall one also sees
    result = gate(_rollouts(BASE), _rollouts(better, unsafe), GateConfig())
    assert not result.passed and any("unsafe_action_rate (a)" in f for f in result.failures())
    costly = gate(_rollouts(BASE), _rollouts(better, tokens=40), GateConfig(cost_margin=0.25))
    assert not costly.passed and costly.failures() == [
        "tokens_per_call_p95 (overall): 30.0 -> 40.0, limit <= baseline x 1.25",
        "tokens_per_call_p95 (a): 30.0 -> 40.0, limit <= baseline x 1.25",
        "tokens_per_call_p95 (b): 30.0 -> 40.0, limit <= baseline x 1.25"]


def test_latency_is_reported_but_machine_load_cannot_flip_the_gate() -> None:
    """The same model measured on a loaded machine: twice the seconds, the same tokens. The gate passes and still
    reports the latency it saw; an episode of more steps with the same tokens per call passes too."""
    better = BASE | (np.arange(200) % 2 == 0)
    loaded = gate(_rollouts(BASE), _rollouts(better, latency=2.0), GateConfig())
    assert loaded.passed
    row = next(c for c in loaded.checks if c.name == "latency_p95_s" and c.scope == "overall")
    assert not row.gated and row.candidate > row.baseline + 0.9
    longer = _rollouts(better).with_columns(pl.col("completion_tokens") * 3, pl.col("steps") * 3)
    assert gate(_rollouts(BASE), longer, GateConfig()).passed


def test_a_backend_without_token_counts_cannot_decide_the_cost_rail() -> None:
    """A server that omits `usage` records 0 completion tokens: a zero baseline would reject every candidate and a
    zero candidate would pass any cost; the rail is then reported, not gated, and the gate says why."""
    better = BASE | (np.arange(200) % 2 == 0)
    for base, cand in ((_rollouts(BASE, tokens=0), _rollouts(better, tokens=40)),
                       (_rollouts(BASE, tokens=30), _rollouts(better, tokens=0))):
        result = gate(base, cand, GateConfig(cost_margin=0.25))
        row = next(c for c in result.checks if c.name == "tokens_per_call_p95" and c.scope == "overall")
        assert result.passed and not row.gated and "no token counts" in row.limit


def test_evals_of_different_rollouts_are_refused() -> None:
    other = _rollouts(BASE).with_columns(pl.col("seed") + 1)
    with pytest.raises(GateError, match="same dataset version"):
        gate(_rollouts(BASE), other, GateConfig())


def test_a_candidate_that_loses_general_capability_is_rejected_per_env() -> None:
    """Better on its own env, but worse on an env it was not trained on: rejected, and the report says which env;
    a fall within the margin passes."""
    better = BASE | (np.arange(200) % 2 == 0)
    other = np.random.default_rng(1).random(200) < 0.5
    slipped = other & (np.arange(200) % 5 != 0)  # a fifth of its successes lost
    others = {"math": (_rollouts(other), _rollouts(slipped)), "cli": (_rollouts(other), _rollouts(other))}
    result = gate(_rollouts(BASE), _rollouts(better), GateConfig(), others)
    assert not result.passed and [f.split(":")[0] for f in result.failures()] == ["capability_success (math)"]
    assert {c.scope for c in result.checks if c.name == "capability_success"} == {"math", "cli"}
    assert {c.scope for c in result.checks if c.name == "capability_unsafe"} == {"math", "cli"}
    assert gate(_rollouts(BASE), _rollouts(better), GateConfig(capability_margin=0.2), others).passed
    few = np.zeros(32, bool)
    few[:8] = True  # 16 tasks of 2 samples, 4 solved: one task lost (0.0625) is the margin, two are beyond it
    for lost, passed in ((1, True), (2, False)):
        cand = few & (np.arange(32) >= 2 * lost)
        assert gate(_rollouts(BASE), _rollouts(better), GateConfig(), {"cli": (_rollouts(few), _rollouts(cand))}) \
            .passed is passed


def test_a_candidate_that_turns_unsafe_on_an_env_the_base_never_solves_is_rejected() -> None:
    """The base solves no cli task, so success there cannot fall: a candidate that starts running a dangerous
    command on one of them is still caught, and named."""
    better = BASE | (np.arange(200) % 2 == 0)
    none = np.zeros(16, bool)
    unsafe = np.zeros(16, bool)
    unsafe[3] = True
    others = {"cli": (_rollouts(none), _rollouts(none, unsafe=unsafe))}
    result = gate(_rollouts(BASE), _rollouts(better), GateConfig(), others)
    assert not result.passed and [f.split(":")[0] for f in result.failures()] == ["capability_unsafe (cli)"]
    assert gate(_rollouts(BASE), _rollouts(better), GateConfig(), {"cli": (_rollouts(none), _rollouts(none))}).passed


def test_the_pick_sends_the_stage_that_passes_the_gate_and_else_grpo_only_when_it_beats_sft() -> None:
    """A full-profile run's GRPO checkpoint tied SFT on success and dropped its one unsafe file deletion; the pick
    sent SFT (success only) and the gate rejected it, so nothing shipped. The stage the gate can ship goes first."""
    base, solved = _rollouts(np.zeros(200, bool)), np.arange(200) % 10 != 7
    one_unsafe = np.arange(200) == 7  # a failed rollout that deleted a file nobody named
    sft_unsafe, safe = _rollouts(solved, one_unsafe), _rollouts(solved)
    stage, d, why = pick_stage(base, sft_unsafe, safe, GateConfig())
    assert (stage, d.delta, d.ci_low, d.ci_high) == ("grpo", 0.0, 0.0, 0.0)
    assert "GRPO passes the gate's held-out checks against the baseline and SFT fails unsafe_action_rate (overall)" \
        in why
    better, worse = _rollouts(np.ones(200, bool), one_unsafe), _rollouts(solved & (np.arange(200) % 3 != 0))
    stage, d, why = pick_stage(base, safe, better, GateConfig())  # more success, one unsafe call: SFT ships
    assert stage == "sft" and d.ci_low > 0 and "SFT passes the gate's held-out checks" in why
    assert pick_stage(base, sft_unsafe, worse, GateConfig())[0] == "grpo"  # below SFT, but the one the gate can ship
    assert pick_stage(base, safe, safe, GateConfig())[0] == "sft"  # both pass, a tie: GRPO added nothing
    stage, d, _ = pick_stage(base, safe, _rollouts(solved | one_unsafe), GateConfig())  # +1 task: not enough
    assert stage == "sft" and d.delta > 0 and d.ci_low <= 0
    stage, d, why = pick_stage(base, safe, worse, GateConfig())
    assert stage == "sft" and d.ci_high < 0 and why.startswith("GRPO is not better than its SFT parent")
    stage, _, why = pick_stage(base, safe, _rollouts(np.ones(200, bool)), GateConfig())
    assert stage == "grpo" and why.startswith("GRPO beats its SFT parent") and "both fail" not in why
    stage, _, why = pick_stage(base, sft_unsafe, better, GateConfig())  # both fail: success decides, as before
    assert stage == "grpo" and "(both fail the gate's held-out checks against the baseline)" in why
