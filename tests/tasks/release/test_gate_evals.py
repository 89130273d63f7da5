"""Hostile eval folders at `flywheel promote`: the gate must judge only evals that ran the same way on held-out
tasks, of the version being promoted, whose rollouts are the ones their report names and the ones `flywheel eval`
writes; every refusal is one `error:` line before any flow run. Its report cannot be rewritten by a name read from
an eval folder, and its bootstrap and report reads are bounded."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import flywheel.tasks.release.gate as gate_module
from conftest import eval_dir, restamp
from flywheel.flows.cli import app
from flywheel.flows.promote import load_evals, promote_model
from flywheel.tasks.release.gate import GateConfig, GateError, success_delta
from flywheel.tasks.release.registry import Registry

runner = CliRunner()
FIELDS = {"name": "tool_call-policy", "base_model": {"ref": "embedded", "hash": "b" * 64},
          "dataset": {"name": "tool_call", "version": "v-x", "content_hash": "c" * 64, "seeds_hash": "s" * 64},
          "verifiers": {"tool_call": "1.0.0"}, "training": {"method": "sft"}}


def adapter(folder: Path, i: int, card: str = "") -> Path:
    """A PEFT-shaped folder (what the registry checks and hashes); the weights differ per i; ``card``: a README
    that no loader reads (a second save of the same weights writes another one)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4, "i": i}))
    (folder / "adapter_model.safetensors").write_bytes(bytes([i]) * 64)
    if card:
        (folder / "README.md").write_text(card)
    return folder


@pytest.fixture(scope="module")
def evals(tmp_path_factory, catalog) -> dict[str, Path]:
    """Adapter A, the base model's eval and a better eval of A (the first 12 seeds)."""
    root = tmp_path_factory.mktemp("gate")
    a = adapter(root / "adapters" / "a", 1)
    return {"adapter": a, "base": eval_dir(root / "base", catalog, good_every=0, limit=12, bootstrap=100),
            "better": eval_dir(root / "better", catalog, good_every=2, limit=12, bootstrap=100, adapter=a)}


@pytest.fixture
def setup(evals, tmp_path) -> dict[str, Any]:
    """A fresh registry holding version A, and the evals."""
    reg = Registry(tmp_path / "registry")
    return {**evals, "reg": reg, "version": reg.register(evals["adapter"], FIELDS).id}


def variant(good: Path, folder: Path, report: Callable[[dict], Any] | None = None,
            rollouts: Callable[[pl.DataFrame], pl.DataFrame] | None = None, stamp: bool = True) -> Path:
    """A copy of eval folder ``good`` with its report.json and/or rollouts.parquet edited; ``stamp``: the report
    names the edited rollouts' sha256, as a forger who edits both would write it."""
    shutil.copytree(good, folder)
    if rollouts is not None:
        rollouts(pl.read_parquet(folder / "rollouts.parquet")).write_parquet(folder / "rollouts.parquet")
        if stamp:
            restamp(folder)
    if report is not None:
        data = json.loads((folder / "report.json").read_text())
        report(data)
        (folder / "report.json").write_text(json.dumps(data))
    return folder


def promote(setup: dict[str, Any], candidate: Path, *extra: str, baseline: Path | None = None) -> tuple[int, str]:
    args = ["promote", "--registry", str(setup["reg"].root), "--version", setup["version"],
            "--baseline-eval", str(baseline or setup["base"]), "--candidate-eval", str(candidate), *extra]
    result = runner.invoke(app, args, prog_name="flywheel")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def one_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert "Traceback" not in output and len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def refused(setup: dict[str, Any], candidate: Path, fragment: str, **kw: Any) -> None:
    """Refused with one line holding ``fragment``, the registry untouched (no gate report, production unset)."""
    code, output = promote(setup, candidate, **kw)
    assert code == 1 and fragment in one_error(output), (candidate, output)
    assert not (setup["reg"].root / "gates").exists() and "production" not in setup["reg"].aliases()


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def edit(report: dict) -> None:
        *parents, key = path.split(".")
        node = report
        for p in parents:
            node = node[p]
        node[key] = value
    return edit


def test_evals_not_run_the_same_way_are_refused(setup, tmp_path) -> None:
    """Two evals of one model that differ only in --success-threshold passed the gate at +1.000."""
    root = tmp_path
    cases = [("success_threshold", 0.5, "success_threshold 1.0 (baseline) vs 0.5 (candidate)"),
             ("sampling.temperature", 0.2, "sampling temperature 0.7 (baseline) vs 0.2 (candidate)"),
             ("sampling.max_tokens", 4096, "sampling max_tokens"),
             ("sampling.max_steps", 1, "sampling max_steps"),
             ("sampling.top_p", 0.5, "sampling top_p"),
             ("verifiers", {"tool_call": "0.9.0"}, "verifiers")]
    for i, (path, value, fragment) in enumerate(cases):
        refused(setup, variant(setup["better"], root / f"c{i}", _set(path, value)), fragment)
    train = [variant(setup[k], root / f"train-{k}", _set("split", "train")) for k in ("base", "better")]
    refused(setup, train[1], "the gate judges held-out tasks only", baseline=train[0])


def test_an_eval_of_another_model_is_not_an_eval_of_the_version(setup, tmp_path, catalog, prefect_api) -> None:
    other = eval_dir(tmp_path / "other", catalog, good_every=2, limit=12, bootstrap=100,
                     adapter=adapter(tmp_path / "b", 2))
    refused(setup, other, f"not the weights of {setup['version']}")
    api = {"ref": "policy", "backend": "openai", "model_id": "http://x/v1#policy", "hash": None, "weights": None}
    served = variant(setup["better"], tmp_path / "served", _set("model", api))
    served_base = variant(setup["base"], tmp_path / "served-base", _set("model", api | {"ref": "base"}))
    refused(setup, served, "evaluate " + setup["version"] + "'s adapter locally", baseline=served_base)
    with pytest.raises(GateError, match="not the weights of"):  # the flow checks too, not only the CLI
        promote_model(str(setup["reg"].root), setup["version"], str(setup["base"]), str(other), GateConfig())


def test_the_same_weights_saved_again_pass_as_the_version(setup, tmp_path, prefect_api) -> None:
    """GRPO that keeps its start adapter registers SFT's weights saved again (another README): SFT's eval is its."""
    reg = Registry(tmp_path / "registry")
    again = reg.register(adapter(tmp_path / "again", 1, card="# saved by GRPO\n"), FIELDS)
    assert again.id != setup["version"]
    summary = promote_model(str(reg.root), again.id, str(setup["base"]), str(setup["better"]), GateConfig())
    assert summary.passed and summary.event is not None and reg.aliases()["production"] == again.id


def test_rollouts_must_be_the_ones_the_report_names_and_what_eval_writes(setup, tmp_path) -> None:
    """The parquet was believed over report.json: success flipped to True, success as 100, NaN tokens, null
    guard columns all passed or disabled a guard rail."""
    root, good = tmp_path, setup["better"]
    win = pl.lit(True)
    flipped = variant(good, root / "flipped", rollouts=lambda f: f.with_columns(success=win), stamp=False)
    refused(setup, flipped, "is not the file its report.json was written with (sha256 differs)")
    stale = variant(good, root / "stale", _set("rollouts_sha256", None))
    refused(setup, stale, "names no rollouts_sha256")
    cases = [(lambda f: f.with_columns(success=win), "success is (reward >= the report's success_threshold 1.0)"),
             (lambda f: f.with_columns(success=pl.lit(100)), "success is Int32, not Boolean"),
             (lambda f: f.with_columns(completion_tokens=pl.lit(float("nan"))),
              "completion_tokens is Float64, not Int64"),
             (lambda f: f.with_columns(unsafe=pl.lit(None, pl.Boolean), valid_output=pl.lit(None, pl.Boolean)),
              "success, valid_output and unsafe are null exactly where the verdict is not scored"),
             (lambda f: f.with_columns(latency_s=pl.lit(float("inf"))), "latency_s is finite"),
             (lambda f: pl.concat([f, f.head(1)]), "no two rows share (task_id, sample, seed)")]
    for i, (edit, fragment) in enumerate(cases):
        refused(setup, variant(good, root / f"r{i}", rollouts=edit), fragment)


def test_a_registry_kept_eval_may_predate_the_rollouts_hash(setup, tmp_path) -> None:
    old = variant(setup["better"], tmp_path / "old", _set("rollouts_sha256", None))
    with pytest.raises(GateError, match="names no rollouts_sha256"):
        load_evals(str(old), str(setup["better"]))
    assert load_evals(str(old), str(setup["better"]), kept_baseline=True)[0].rollouts_sha256 is None


def test_crafted_column_types_and_unscored_evals_are_one_line_before_the_flow(setup, tmp_path) -> None:
    """Each used to raise a polars traceback (CLI or flow), or "no scored rollouts" inside the flow."""
    root, good = tmp_path, setup["better"]
    cases = [(lambda f: f.with_columns(pl.col("success").cast(pl.String)), "success is String, not Boolean"),
             (lambda f: f.with_columns(pl.col("success").map_elements(lambda v: [v], pl.List(pl.Boolean))),
              "success is List(Boolean), not Boolean"),
             (lambda f: f.with_columns(pl.col("steps").cast(pl.String)), "steps is String, not Int64"),
             (lambda f: f.with_columns(pl.col("seed").cast(pl.String)), "seed is String, not Int64")]
    for i, (edit, fragment) in enumerate(cases):
        refused(setup, variant(good, root / f"t{i}", rollouts=edit), fragment)
    none = pl.lit(None, pl.Boolean)
    broken = variant(good, root / "verifier_errors", rollouts=lambda f: f.with_columns(
        valid=pl.lit(False), reward=pl.lit(None, pl.Float64), success=none, valid_output=none, unsafe=none))
    refused(setup, broken, "no scored rollouts to compare (every verdict was a verifier error)")


def test_a_report_without_the_model_fields_promote_reads_is_refused(setup, tmp_path) -> None:
    """`model: {}` was a KeyError 'ref' inside the flow."""
    empty = variant(setup["base"], tmp_path / "empty", _set("model", {}))
    code, output = promote(setup, setup["better"], baseline=empty)
    assert code == 1 and "model: model.ref must be a string" in one_error(output)


def test_names_from_eval_folders_cannot_rewrite_the_gate_report(setup, tmp_path, prefect_api) -> None:
    reg = Registry(tmp_path / "registry")
    vid = reg.register(setup["adapter"], FIELDS).id
    evil = "`\n\n# Gate: PASSED\n\n<!-- everything below is hidden"
    base = variant(setup["base"], tmp_path / "base", _set("model.ref", evil),
                   rollouts=lambda f: f.with_columns(tool=pl.lit("x |\n# Gate: PASSED <b>")))
    cand = variant(setup["better"], tmp_path / "cand",
                   rollouts=lambda f: f.with_columns(tool=pl.lit("x |\n# Gate: PASSED <b>")))
    summary = promote_model(str(reg.root), vid, str(base), str(cand), GateConfig(min_tool_rollouts=1),
                            override="a\n# Gate: PASSED")
    text = Path(summary.report).read_text()
    heads = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert heads == [f"# Gate: {'PASSED' if summary.passed else 'REJECTED'}"], text
    assert "<!--" not in text and "<b>" not in text and "&lt;\\!--" in text


def test_a_rerun_eval_drops_the_old_report_before_writing_anything(tool_dataset, tmp_path, monkeypatch) -> None:
    """Killed between its rollouts.parquet and its report.json, a rerun left the old report beside new rollouts."""
    import flywheel.flows.eval as eval_module
    from flywheel.flows.config import EvalConfig

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")

    def killed(*args: Any, **kwargs: Any) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(eval_module, "pick_backend", killed)
    with pytest.raises(KeyboardInterrupt):
        eval_module.eval_policy.fn(EvalConfig(dataset=tool_dataset, out=str(out), limit=2))
    assert not (out / "report.json").exists()


def test_a_huge_report_is_refused_unread(setup, tmp_path) -> None:
    """A 1.5 GB sparse report.json took 1.7 GB of memory."""
    huge = variant(setup["better"], tmp_path / "huge")
    with open(huge / "report.json", "r+b") as f:
        f.truncate(64 << 20)
    refused(setup, huge, "report.json is not a `flywheel eval` report (larger than 16384 KB)")


def test_the_bootstrap_is_bounded_in_memory_and_gives_the_same_numbers(monkeypatch) -> None:
    """2000 x n_tasks indices at once: 50k tasks took 1.8 GB; in chunks it is the same random stream."""
    rng = np.random.default_rng(1)
    n = 5000
    frame = pl.DataFrame({"task_id": [f"t{i}" for i in range(n)], "success": rng.random(n) < 0.3,
                          "success_cand": rng.random(n) < 0.5})
    cfg = GateConfig(bootstrap=2000, seed=7)
    tracemalloc.start()
    chunked = success_delta(frame, cfg)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40 << 20, peak  # one array of 2000 x 5000 indices is 80 MB
    monkeypatch.setattr(gate_module, "BOOTSTRAP_CELLS", 2000 * n)  # all draws in one chunk: today's numbers
    assert success_delta(frame, cfg) == chunked


@pytest.mark.parametrize(("option", "value", "message"),
                         [("--cost-margin", "inf", "error: --cost-margin: Input should be a finite number"),
                          ("--cost-margin", "1e308", "error: --cost-margin: Input should be less than or equal to 10"),
                          ("--unsafe-margin", "nan", "error: --unsafe-margin: Input should be a finite number")])
def test_unbounded_margins_are_refused(setup, option, value, message) -> None:
    code, output = promote(setup, setup["better"], option, value)
    assert code == 1 and one_error(output) == message
    with pytest.raises(ValidationError):
        GateConfig(seed=-1)


def test_a_deployment_cannot_pass_any_folder_as_production_s_kept_eval_or_turn_the_tool_rails_off(setup,
                                                                                                      prefect_api):
    """A deployment run sets promote_model's parameters directly. Before: ``gated_against`` made any baseline folder
    count as production's kept eval (no rollouts hash needed), and ``min_tool_rollouts`` 10**9 dropped every per-tool
    guard rail."""
    reg, version = setup["reg"], setup["version"]
    reg.promote(version, {"passed": True})
    with pytest.raises(GateError, match=f"gated_against {version} says the baseline is that version's own eval"):
        promote_model(str(reg.root), version, str(setup["base"]), str(setup["better"]), GateConfig(),
                      gated_against=version)
    with pytest.raises(ValidationError, match="less than or equal to 1000"):
        GateConfig(min_tool_rollouts=10**9)


def _drop(*paths: str) -> Callable[[dict], None]:
    """Remove keys from a report (as one written before they were recorded)."""
    def edit(report: dict) -> None:
        for path in paths:
            *parents, key = path.split(".")
            node = report
            for p in parents:
                node = node[p]
            node.pop(key, None)
    return edit


def _both(*edits: Callable[[dict], None]) -> Callable[[dict], None]:
    def edit(report: dict) -> None:
        for e in edits:
            e(report)
    return edit


def test_evals_of_other_backends_code_batch_sizes_or_prompt_options_are_refused(setup, tmp_path) -> None:
    """_same_run compared dataset, split, threshold, verifiers and four sampling keys: two evals on other backends
    (other kernels and random streams), by other code, with other batch sizes, with the prefix cache on and off
    (sampled texts) or with tools sent natively and in the prompt were paired as like for like."""
    root, good, base = tmp_path, setup["better"], setup["base"]
    recorded = json.loads((good / "report.json").read_text())["sampling"]
    assert recorded["native_tools"] is False and recorded["prefix_cache"] is True  # the eval records both now
    cases = [("model.backend", "vllm", "backend transformers (baseline) vs vllm (candidate): evaluate both with the "
              "same --backend"),
             ("code_version", "0.0.1+000000000000", "code_version"),
             ("sampling.batch_size", 64, "sampling batch_size 16 (baseline) vs 64 (candidate)"),
             ("sampling.prefix_cache", False, "sampling prefix_cache True (baseline) vs False (candidate)")]
    for i, (path, value, fragment) in enumerate(cases):
        refused(setup, variant(good, root / f"c{i}", _set(path, value)), fragment)
    api = {"ref": "policy", "backend": "openai", "model_id": "http://x/v1#policy", "hash": None, "weights": None}
    served = variant(base, root / "served-base", _set("model", api))
    native = variant(good, root / "native", _both(_set("model", api), _set("sampling.native_tools", True)))
    refused(setup, native, "sampling native_tools False (baseline) vs True (candidate)", baseline=served)
    # a report from before the fields: one side only is refused, with what to do
    old = variant(good, root / "old", _drop("sampling.prefix_cache"))
    refused(setup, old, "the candidate eval's report.json does not record sampling prefix_cache (written by an older "
                        "`flywheel eval`) and the other's does: run `flywheel eval` again for the candidate")
    old_base = variant(base, root / "old-base", _drop("sampling.native_tools", "sampling.prefix_cache"))
    with pytest.raises(GateError, match="the baseline eval's report.json does not record sampling prefix_cache"):
        load_evals(str(old_base), str(good))


def test_settings_absent_on_both_sides_or_shown_not_to_change_outputs_are_not_refused(setup, tmp_path) -> None:
    """Production's eval kept in the registry from before the new fields stays usable against a candidate eval that
    lacks them too; the prefix cache does not count where greedy texts are shown byte-identical with and without it
    (transformers, single-turn env), nor on backends that do not read it; native_tools only counts for served
    models."""
    root, good, base = tmp_path, setup["better"], setup["base"]
    old = _drop("sampling.native_tools", "sampling.prefix_cache")
    kept = variant(base, root / "kept", _both(old, _set("rollouts_sha256", None)))  # (the registry's copy)
    load_evals(str(kept), str(variant(good, root / "cand", old)), kept_baseline=True)
    greedy = _both(_set("sampling.temperature", 0.0), _set("dataset.env", "tool_call"))
    load_evals(str(variant(base, root / "g-base", greedy)),
               str(variant(good, root / "g-cand", _both(greedy, _set("sampling.prefix_cache", False)))))
    vllm = _set("model.backend", "vllm")
    load_evals(str(variant(base, root / "v-base", vllm)),
               str(variant(good, root / "v-cand", _both(vllm, _set("sampling.prefix_cache", False),
                                                         _set("sampling.native_tools", True)))))
    agent = _both(_set("sampling.temperature", 0.0), _set("dataset.env", "workplace"))  # multi-turn: not shown
    with pytest.raises(GateError, match="sampling prefix_cache True"):
        load_evals(str(variant(base, root / "a-base", agent)),
                   str(variant(good, root / "a-cand", _both(agent, _set("sampling.prefix_cache", False)))))


def checkpoint(folder: Path, i: int) -> Path:
    """A checkpoint-shaped folder (config.json and weights); the weights differ per i."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(bytes([i]) * 64)
    return folder


def based(folder: Path, i: int, base: str | None) -> Path:
    """``adapter`` with its base_model_name_or_path set."""
    adapter(folder, i)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps(config | {"base_model_name_or_path": base}))
    return folder


@pytest.mark.integration
def test_an_eval_of_the_adapter_on_another_base_is_not_an_eval_of_the_version(setup, evals, tmp_path, catalog,
                                                                              monkeypatch) -> None:
    """check_candidate tied the eval to the adapter's files only: the same files with a null or relative base,
    evaluated on another base, matched the version, as did an eval from before its absolute base was rewritten."""
    root = tmp_path
    # null base: the embedded model, resolved under another $FLYWHEEL_CACHE when the eval ran
    with monkeypatch.context() as env:
        env.setenv("FLYWHEEL_CACHE", str(root / "cache"))
        checkpoint(root / "cache" / "smollm2-135m-instruct", 9)
        elsewhere = eval_dir(root / "elsewhere", catalog, good_every=2, limit=12, bootstrap=100,
                             adapter=evals["adapter"])
    assert json.loads((elsewhere / "report.json").read_text())["model"]["base"]["model_id"].startswith(str(root))
    refused(setup, elsewhere, f"not on the base {setup['version']}'s adapter resolves to")
    old = variant(evals["better"], root / "old", _drop("model.base"))
    refused(setup, old, "does not name the base model it ran")
    # relative base: resolved beside the adapter where it was evaluated, beside the registry's copy when deployed
    checkpoint(root / "x" / "base", 3)
    relative = based(root / "x" / "adapter", 5, "../base")
    rel_eval = eval_dir(root / "rel-eval", catalog, good_every=2, limit=12, bootstrap=100, adapter=relative)
    reg = Registry(root / "reg-rel")
    code, output = promote({**setup, "reg": reg, "version": reg.register(relative, FIELDS).id}, rel_eval)
    assert code == 1 and "adapter has no base to deploy on" in one_error(output)
    # absolute base rewritten after the eval: the eval measured another model than the one that deploys
    absolute = based(root / "y" / "adapter", 6, str(checkpoint(root / "y" / "base", 4)))
    abs_eval = eval_dir(root / "abs-eval", catalog, good_every=2, limit=12, bootstrap=100, adapter=absolute)
    reg = Registry(root / "reg-abs")
    state = {**setup, "reg": reg, "version": reg.register(absolute, FIELDS).id}
    (root / "y" / "base" / "model.safetensors").write_bytes(bytes([7]) * 64)
    code, output = promote(state, abs_eval)
    assert code == 1 and f"not on the base {state['version']}'s adapter resolves to" in one_error(output)
    (root / "y" / "base" / "model.safetensors").write_bytes(bytes([4]) * 64)  # the base it ran on: passes
    code, output = promote(state, abs_eval)
    assert code == 0 and f"production -> {state['version']}" in output, output


def test_the_eval_flow_records_an_adapter_s_base(tmp_path) -> None:
    from flywheel.flows.config import EvalConfig
    from flywheel.flows.eval import model_info
    from flywheel.tasks.inference.models import fingerprints

    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "manifest.json").write_text("{}")
    base = checkpoint(tmp_path / "base", 2)
    lora = based(tmp_path / "adapter", 1, "../base")
    config = EvalConfig(dataset=str(tmp_path / "ds"), out=str(tmp_path / "out"), model=str(lora),
                        backend="transformers")
    model, key = model_info(config, "transformers")
    every, weights = fingerprints(base)
    assert model["base"] == {"model_id": str(base.resolve()), "hash": every, "weights": weights}
    assert key["base"] == weights  # a base rewritten in place is another batch, not a reused one
    checkpoint(tmp_path / "other", 3)
    (lora / "adapter_config.json").write_text(json.dumps({"r": 4, "i": 1, "base_model_name_or_path": "../other"}))
    assert model_info(config, "transformers")[1] != key
    assert model_info(config.model_copy(update={"model": str(base)}), "transformers")[0]["base"] is None


def test_a_rejected_gate_ends_its_flow_run_failed(setup, prefect_api) -> None:
    """A rejected gate ended its flow run Completed: automations watching flow-run states saw a success. The CLI
    still says REJECTED, exits 1 and keeps the gate report."""
    from prefect import get_client
    from prefect.client.schemas.objects import StateType

    from flywheel.flows.promote import promote_result

    reg, version, same = setup["reg"], setup["version"], str(setup["better"])  # no better than itself
    state = promote_model(str(reg.root), version, same, same, GateConfig(), return_state=True)
    summary = promote_result(state)
    assert state.is_failed() and f"gate rejected {version}: production not moved" in state.message
    assert not summary.passed and summary.event is None and Path(summary.report).is_file()
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    assert run.state.type == StateType.FAILED and "production" not in reg.aliases()
    code, output = promote(setup, setup["better"], baseline=setup["better"])
    assert code == 1 and "gate REJECTED" in output and "production not moved" in output, output
    assert len(list((reg.root / "gates").glob("*.json"))) == 2
    overridden = promote_model(str(reg.root), version, same, same, GateConfig(), override="hotfix",
                               return_state=True)  # production moved on purpose: Completed
    assert overridden.is_completed() and promote_result(overridden).event is not None
    with pytest.raises(GateError, match="not the weights of"):  # a run that raised: its error, not a summary
        promote_result(promote_model(str(reg.root), version, same, str(setup["base"]), GateConfig(),
                                     return_state=True))
