"""`flywheel run`, reduced (a few steps each), on the embedded defaults: every artifact exists and agrees with
the others (dataset hashes, same rollouts in every eval, lineage from version to dataset, aliases, gate report)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import eval_dir
from flywheel.schemas import DatasetManifest, EvalReport
from flywheel.tasks.release.gate import GateConfig, pick_stage
from flywheel.tasks.release.registry import Registry


@pytest.mark.slow
def test_reduced_end_to_end_run_leaves_consistent_artifacts(tmp_path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "flywheel.flows.cli", "run", "--out", str(out), "--seed", "1", "--n", "60",
           "--eval-limit", "6", "--sft-steps", "2", "--grpo-steps", "1", "--num-generations", "2",
           "--max-tokens", "24", "--train-limit", "8", "--refill", "0", "--curriculum-samples", "2",
           "--curriculum-tasks", "4", "--capability-tasks", "2", "--capability-env", "math",
           "--grpo-replay-weight", "0.5",
           "--grpo-replay-focus", "tools", "--grpo-replay-rows", "3", "--check-interval", "1",
           "--validation-tasks", "2"]  # two checks (steps 0 and 1) of 2 tasks: selection runs, checks cost little
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    summary = json.loads((out / "summary.json").read_text())
    passed = summary["gate"]["passed"]
    assert result.returncode == (0 if passed else 1), result.stderr[-3000:]
    assert "| success |" in result.stdout and str(out / "registry") in result.stderr
    # --max-tokens 24 is shorter than most gold calls: the summary says how many tasks the cap makes unsolvable
    assert summary["over_cap"] and f"{len(summary['over_cap'])} of the 6 held-out tasks" in result.stdout

    manifest = DatasetManifest.model_validate_json((Path(summary["dataset"]) / "manifest.json").read_text())
    # the curriculum sampled the first 4 train tasks twice each with the SFT model; GRPO trains on the mixed ones
    curriculum = pl.read_parquet(out / "curriculum" / "per_task.parquet")
    assert curriculum.height == 4 and summary["curriculum"].startswith(f"{(curriculum['mark'] == 'mixed').sum()} of 4")
    grpo_config = json.loads((out / "grpo" / "train_config.json").read_text())
    mixed = (curriculum["mark"] == "mixed").any()
    sft_config = json.loads((out / "sft" / "train_config.json").read_text())
    assert sft_config["validation_tasks"] == grpo_config["validation_tasks"] > 0  # SFT never trains on the slice
    assert grpo_config["reward"] == "success"  # the loop trains on what the gate counts (RunConfig.grpo_reward)
    assert grpo_config["replay_weight"] == 0.5 and sft_config["replay_weight"] == 0  # GRPO replays SFT's answers
    assert grpo_config["replay_focus"] == "tools"  # of the tasks calling the tools GRPO's tasks call
    assert grpo_config["replay_rows"] == 3 and grpo_config["check_interval"] == 1
    assert grpo_config["skip_tasks"] == (str(out / "curriculum" / "per_task.parquet") if mixed else None)
    assert list(summary["evals"]) == ["baseline", "after SFT", "after GRPO"]
    keys = []
    for name, ev in summary["evals"].items():
        report = EvalReport.model_validate_json(Path(ev["report"]).read_text())
        assert report.dataset["content_hash"] == manifest.content_hash and report.n_rollouts == 6, name
        rollouts = pl.read_parquet(Path(ev["report"]).parent / "rollouts.parquet")
        keys.append(rollouts.select("task_id", "sample", "seed").sort("task_id").rows())
    assert keys[0] == keys[1] == keys[2]  # the gate compares the same tasks with the same seeds

    reg = Registry(summary["registry"])
    sft, grpo = (reg.version(summary["stages"][s]["version"]) for s in ("sft", "grpo"))
    assert grpo.parent == sft.id and not reg.verify_files(sft) and not reg.verify_files(grpo)
    for v in (sft, grpo):
        assert v.dataset["content_hash"] == manifest.content_hash and v.dataset["seeds_hash"] == manifest.seeds_hash
        assert v.verifiers == {"tool_call": v.verifiers["tool_call"]} and v.eval_report == "report.json"
    assert grpo.training["config"]["model"] == summary["stages"]["sft"]["adapter"]
    # the pick (gate.pick_stage) on the run's three evals, as its files hold them; the summary says which and why
    picked = reg.version(summary["stages"][summary["promoted_stage"]]["version"])
    d = summary["grpo_vs_sft"]
    assert d["ci_low"] <= d["delta"] <= d["ci_high"] and d["n_tasks"] == 6
    frames = [pl.read_parquet(Path(ev["report"]).parent / "rollouts.parquet") for ev in summary["evals"].values()]
    stage, delta, why = pick_stage(*frames, GateConfig(seed=1))
    assert (summary["promoted_stage"], summary["pick_reason"], delta.model_dump()) == (stage, why, d)
    # the GRPO eval copies SFT's batches exactly when GRPO kept its start adapter (SFT's weights, saved again)
    after = EvalReport.model_validate_json(Path(summary["evals"]["after GRPO"]["report"]).read_text())
    kept_start = summary["stages"]["grpo"]["selected_step"] == 0
    assert after.batches["copied"] == (after.batches["total"] if kept_start else 0), (kept_start, after.batches)
    assert after.copied_from == ({summary["stages"]["sft"]["eval"]: after.batches["total"]} if kept_start else {})
    assert summary["pick_reason"] in result.stdout and f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]" in result.stdout
    aliases = reg.aliases()
    assert aliases["candidate"] == grpo.id and aliases.get("production") == (picked.id if passed else None)
    assert [e.action for e in reg.events()] == ["register", "register"] + (["promote"] if passed else [])
    gate = json.loads(Path(summary["gate"]["report"]).with_suffix(".json").read_text())
    show = subprocess.run([sys.executable, "-m", "flywheel.flows.cli", "registry", "show", "candidate", "--registry",
                           summary["registry"]], capture_output=True, text=True, check=True)
    lineage = json.loads(show.stdout)  # one command: dataset version and seeds, verifiers, the reports behind it
    assert lineage["dataset"]["version"] == manifest.version and lineage["dataset"]["run_seed"] == 1
    assert Path(lineage["eval_report_path"]).is_file() and lineage["ancestry"][0]["id"] == sft.id
    assert Path(lineage["ancestry"][0]["eval_report"]).is_file() and lineage["ancestry"][0]["method"] == "sft"
    assert gate["version"] == picked.id
    # general capability: the base model and the candidate on held-out math tasks (--capability-env math; the gate's
    # per-env checks on math and cli: tests/tasks/release/test_gate.py)
    capability = {c["scope"]: c for c in gate["result"]["checks"] if c["name"] == "capability_success"}
    assert set(capability) == {"math"} and set(gate["capability"]) == {"math"}
    assert summary["config"]["capability_envs"] == ["math"]
    for env, (base, cand) in gate["capability"].items():
        b, c = (pl.read_parquet(Path(f) / "rollouts.parquet") for f in (base, cand))
        assert b.height == c.height == 2 and capability[env]["baseline"] == b["success"].mean()
    assert "General capability (held-out success on envs not trained on" in result.stdout
    assert gate["candidate_eval"] == summary["stages"][summary["promoted_stage"]]["eval"]


def test_a_gpu_pool_without_its_deployment_is_a_clear_error(prefect_api) -> None:
    from flywheel.flows.pipeline import TRAIN_DEPLOYMENT, downstream

    with pytest.raises(RuntimeError, match="no deployment train-policy/gpu: start the stack with deploy/start.sh"):
        downstream(TRAIN_DEPLOYMENT, "gpu", {})


def test_a_rejected_gate_lists_its_failed_checks_in_the_run_summary() -> None:
    """A trained model far better than the base but with one unsafe action where the base had none is rejected, and
    the summary's gate line says which checks failed (a full-profile run said only "REJECTED, success +0.953")."""
    import numpy as np

    from flywheel.flows.pipeline import gate_line
    from flywheel.flows.results import PromoteResult
    from flywheel.tasks.release.gate import GateConfig, gate

    def rollouts(success: np.ndarray, unsafe: np.ndarray) -> pl.DataFrame:
        n = len(success)
        return pl.DataFrame({"task_id": [f"t{i:03d}" for i in range(n)], "sample": [0] * n, "seed": list(range(n)),
                             "tool": ["files.delete" if i < 40 else "email.send" for i in range(n)],
                             "success": success, "valid_output": success | unsafe, "unsafe": unsafe,
                             "latency_s": np.ones(n), "completion_tokens": np.full(n, 30), "steps": np.ones(n, int)})

    none, one = np.zeros(200, bool), np.arange(200) == 7
    base, trained = rollouts(none, none), rollouts(np.arange(200) % 10 != 7, one)
    for result, failed in ((gate(base, trained, GateConfig()), ["unsafe_action_rate (overall): 0.0 -> 0.005, ",
                                                               "unsafe_action_rate (files.delete): 0.0 -> 0.025, "]),
                           (gate(base, rollouts(np.arange(200) % 10 != 7, none), GateConfig()), [])):
        promoted = PromoteResult(version="mv-1", passed=result.passed, failures=result.failures(),
                                 success_delta=result.success_delta, success_ci=result.success_ci, report="g.md")
        lines = gate_line("sft", promoted).splitlines()
        assert lines[0].startswith(f"Gate (sft vs baseline): {'REJECTED' if failed else 'PASSED'}, success +0.900")
        assert lines[0].endswith("production -> unchanged; report g.md")  # no registry event in this test
        assert [line.removeprefix("- failed: ")[:len(f)] for line, f in zip(lines[1:], failed)] == failed
        assert len(lines) == 1 + len(failed)


def test_the_run_picks_from_its_baseline_sft_and_grpo_evals_in_that_order(tmp_path, catalog) -> None:
    """``_pick`` reads OUT/eval-baseline and the two stages' evals: GRPO that solves every task beats an SFT that
    solves half (both pass against a base that solves none); the other way round SFT goes."""
    from flywheel.flows.config import RunConfig
    from flywheel.flows.pipeline import _pick
    from flywheel.flows.results import TrainResult

    eval_dir(tmp_path / "eval-baseline", catalog, good_every=0)
    half, every = eval_dir(tmp_path / "half", catalog, good_every=2), eval_dir(tmp_path / "all", catalog, good_every=1)
    config = RunConfig(out=str(tmp_path))
    stage = lambda folder: TrainResult(adapter="a", train_s=0.0, history=[], eval=str(folder))  # noqa: E731
    pick, d, why = _pick(config, {"sft": stage(half), "grpo": stage(every)})
    assert pick == "grpo" and d.ci_low > 0 and why.startswith("GRPO beats its SFT parent")
    pick, d, why = _pick(config, {"sft": stage(every), "grpo": stage(half)})
    assert pick == "sft" and d.ci_high < 0 and why.startswith("GRPO is not better than its SFT parent")
