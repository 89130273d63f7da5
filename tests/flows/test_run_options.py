"""`flywheel run` and the deployment entry flows, refused up front. Before: `run --n 20` published a dataset with an
empty held-out split and stopped later ("split 'heldout' ... has no tasks"); a rerun into an OUT with another option
ran the cached stages and failed only at the stage the option changed; a deployment run's bad parameter showed
pydantic's multi-line dump and a traceback in the flow run."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from test_cli_input import _invoke, _one_error

from flywheel.flows.config import RunConfig


def _no_stage(*_args, **_kwargs):
    raise AssertionError("a stage ran before the run's options were checked")


def test_a_held_out_split_that_must_be_empty_is_refused_before_the_run(tmp_path) -> None:
    with pytest.raises(ValidationError, match="--n 20: the held-out split would be empty with 20 rows at "
                                              "--heldout-fraction 0.02 .* raise --n or --heldout-fraction"):
        RunConfig(out=str(tmp_path / "o"), n=20, heldout_fraction=0.02)
    code, output = _invoke("run", "--out", str(tmp_path / "o"), "--n", "20", "--heldout-fraction", "0.02")
    assert code == 1 and "a tool needs at least 25 rows for one to be held out" in _one_error(output), output
    assert not (tmp_path / "o").exists()


def test_a_run_whose_held_out_split_is_empty_stops_before_publishing(tmp_path, prefect_api, monkeypatch) -> None:
    import flywheel.flows.pipeline as pipeline
    from flywheel.flows.generate import DatasetError

    monkeypatch.setattr(pipeline, "eval_policy", _no_stage)  # before: a dataset, then "has no tasks" at the eval
    monkeypatch.setattr(pipeline, "_cap_check", _no_stage)
    out = tmp_path / "o"
    with pytest.raises(DatasetError, match="the held-out split has 0 tasks, fewer than the 1 needed .* with 20 rows "
                                           "at --heldout-fraction 0.2 .* raise --n or --heldout-fraction"):
        pipeline.run_pipeline(RunConfig(out=str(out), n=20, capability_tasks=0))
    datasets = out / "datasets"
    assert not [p for p in datasets.rglob("manifest.json")]  # nothing published the run cannot use
    assert not (out / pipeline.CLAIM).exists()  # unclaimed: the rerun with a larger --n is not refused


def test_a_rerun_with_other_options_is_refused_before_any_stage(tmp_path, prefect_api, monkeypatch) -> None:
    import flywheel.flows.pipeline as pipeline

    monkeypatch.setattr(pipeline, "run_generate", _no_stage)
    out = tmp_path / "o"
    out.mkdir()
    first = RunConfig(out=str(out), seed=1, sft_steps=2)
    (out / pipeline.CLAIM).write_text(json.dumps(first.model_dump(mode="json")))
    message = (f"{out} holds a flywheel run with other options (--seed 1 there, 2 now, --sft-steps 2 there, 100 now; "
               "recorded in run_config.json): rerun with its values to resume it, or pass a new --out")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pipeline.run_pipeline(RunConfig(out=str(out), seed=2))
    code, output = _invoke("run", "--out", str(out), "--seed", "2")
    assert code == 1 and _one_error(output) == f"error: {message}", output
    # where the work runs is no option of the run's outputs; the same options pass the check
    pipeline.check_run_claim(RunConfig(out=f"{out}/", seed=1, sft_steps=2, workers=1, dask_address="tcp://x:1"))
    # an OUT of a run made before run_config.json: its summary.json's config is the record
    (out / pipeline.CLAIM).unlink()
    (out / "summary.json").write_text(json.dumps({"config": first.model_dump(mode="json")}))
    with pytest.raises(ValueError, match="--seed 1 there, 2 now.*recorded in summary.json"):
        pipeline.check_run_claim(RunConfig(out=str(out), seed=2, sft_steps=2))
    # an option the old run did not record ran as its default: the message names that value (was "(not recorded)")
    old = {k: v for k, v in first.model_dump(mode="json").items() if k != "grpo_replay_focus"}
    (out / "summary.json").write_text(json.dumps({"config": old}))
    told = '--grpo-replay-focus not recorded \\(its default "all"\\) there, "tools" now'
    with pytest.raises(ValueError, match=told):
        pipeline.check_run_claim(RunConfig(out=str(out), seed=1, sft_steps=2, grpo_replay_weight=0.5,
                                           grpo_replay_focus="tools"))
    (out / "summary.json").write_text("[1]")
    with pytest.raises(ValueError, match="is not a flywheel run's record"):
        pipeline.check_run_claim(RunConfig(out=str(out)))


def test_a_deployment_parameter_that_fails_validation_is_one_line(tmp_path, prefect_api) -> None:
    from flywheel.flows.config import ParameterError
    from flywheel.flows.deployments import generate_entry, pipeline_entry

    state = generate_entry(out=str(tmp_path / "d"), n=-5, seed=0, return_state=True)
    assert state.is_failed() and state.message == ("parameter n: Input should be greater than or equal to 1, got -5: "
                                                   "change it in the run's parameters"), state.message
    with pytest.raises(ParameterError, match="parameter n: Input should be greater than or equal to 1"):
        generate_entry(out=str(tmp_path / "d"), n=-5, seed=0)
    state = generate_entry(out=str(tmp_path / "d"), n=5, seed=0, backend="openai", return_state=True)
    assert state.is_failed() and state.message == ("backend 'openai' needs --base-url (e.g. http://127.0.0.1:8000/v1) "
                                                   "and --model: change the run's parameters"), state.message
    state = pipeline_entry(out=str(tmp_path / "r"), n=5, return_state=True)
    assert state.is_failed() and "\n" not in (state.message or "") and (state.message or "").startswith(
        "parameter n: Input should be greater than or equal to 20, got 5"), state.message
    assert not (tmp_path / "d").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize(("given", "error"), [
    (["--capability-env", "sqlx"], "error: --capability-env 'sqlx' is not an env; choose one of cli, code, math, sql, "
                                   "tool_call, workplace"),
    (["--capability-env", "cli", "--capability-env", "cli"], "error: --capability-env cli is given twice: give each "
                                                             "env once")])
def test_a_bad_capability_env_is_refused_before_the_run(tmp_path, given: list[str], error: str) -> None:
    code, output = _invoke("run", "--out", str(tmp_path / "o"), *given)
    assert code == 1 and _one_error(output) == error, output
    assert not (tmp_path / "o").exists()
    assert RunConfig(out=str(tmp_path / "o"), capability_envs=["sql"]).capability_envs == ("sql",)
