"""Policy backends and `flywheel eval` with the real embedded model: seeded generation records, a full eval
on a generated held-out set (twice: same results), resumption after a kill, the OpenAI-compatible backend on a
real server (tool_call and workplace episodes), and bad options."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from conftest import lora_adapter, need_vllm
from flywheel.flows.cli import app
from flywheel.flows.config import EvalConfig, GenerateConfig
from flywheel.flows.eval import group_calls, run_eval
from flywheel.flows.generate import run_generate
from flywheel.schemas import EvalReport
from flywheel.tasks.evaluation.rollouts import rollout_seed
from flywheel.tasks.inference.models import cache_root, export_version, fingerprint
from flywheel.tasks.inference.policy import Request, Sampling, make_backend

runner = CliRunner()
STABLE = ["task_id", "sample", "seed", "completion", "reward", "failure_class", "bucket", "prompt_tokens",
          "completion_tokens", "finish_reason"]


def _requests() -> list[Request]:
    ask = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."}]
    return [Request(ask, [], seed) for seed in (1, 2, 3)]


def _check_seeded(backend) -> None:
    """Same seeds -> same texts; other seeds -> other texts; every generation carries its record."""
    sampling = Sampling(temperature=1.0, max_tokens=16)
    first = backend.generate(_requests(), sampling)
    assert [g.text for g in backend.generate(_requests(), sampling)] == [g.text for g in first]
    assert [g.seed for g in first] == [1, 2, 3]
    assert all(g.latency_s > 0 and g.prompt_tokens > 5 and 0 < g.completion_tokens <= 16 for g in first)
    other = backend.generate([Request(r.messages, [], r.seed + 100) for r in _requests()], sampling)
    assert [g.text for g in other] != [g.text for g in first]


@pytest.mark.slow
def test_transformers_backend_records_and_repeats_with_the_same_seed() -> None:
    _check_seeded(make_backend("transformers", None))


@pytest.mark.slow
@pytest.mark.server
def test_openai_backend_records_repeats_and_speaks_native_tool_calls(model_server) -> None:
    backend = make_backend("openai", "smol", model_server, concurrency=3)
    sampling = Sampling(temperature=1.0, max_tokens=16)
    first = backend.generate(_requests(), sampling)
    assert [g.text for g in backend.generate(_requests(), sampling)] == [g.text for g in first]
    assert all(g.latency_s > 0 and g.prompt_tokens > 5 and g.completion_tokens > 0 for g in first)
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                             "parameters": {"type": "object",
                                                            "properties": {"city": {"type": "string"}}}}}
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "c0", "name": "get_weather", "content": '{"temp_c": 4}'}]
    native = make_backend("openai", "smol", model_server, native_tools=True)
    reply = native.generate([Request(history, [tool], 7)], sampling)[0]  # content null turns are accepted
    assert reply.finish_reason in {"stop", "length", "tool_calls"}
    assert (reply.tool_calls is not None) == (reply.finish_reason == "tool_calls")


def test_pending_batches_go_to_the_backend_in_calls_in_order_and_never_split() -> None:
    pending = [(f"b{i}", [None] * n) for i, n in enumerate([4, 4, 4, 2, 7, 4])]
    assert [[path for path, _ in call] for call in group_calls(pending, 8)] == \
        [["b0", "b1"], ["b2", "b3"], ["b4"], ["b5"]]
    assert group_calls(pending, 1) == [[batch] for batch in pending]  # a batch over the limit is a call of its own
    assert group_calls([], 8) == []


def _eval(tool_dataset: str, out: Path, **options) -> dict:
    config = EvalConfig(dataset=tool_dataset, out=str(out), limit=6, samples=2, batch_size=4, max_tokens=24,
                        bootstrap=200, **options)
    return run_eval(config)


@pytest.mark.slow
def test_eval_on_the_embedded_model_is_reproducible_and_complete(tool_dataset, tmp_path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    first = _eval(tool_dataset, tmp_path / "a")
    second = _eval(tool_dataset, tmp_path / "b")
    a, b = (pl.read_parquet(tmp_path / x / "rollouts.parquet") for x in "ab")
    assert a.height == 12 and a.select(STABLE).equals(b.select(STABLE))
    report = EvalReport.model_validate_json((tmp_path / "a" / "report.json").read_text())
    again = EvalReport.model_validate_json((tmp_path / "b" / "report.json").read_text())
    skip = {"latency_p50_s", "latency_p95_s"}
    assert {k: v for k, v in report.metrics.items() if k not in skip} == \
        {k: v for k, v in again.metrics.items() if k not in skip}
    assert report.decision == again.decision and first["decision"] == report.decision.action
    assert report.n_tasks == 6 and report.n_rollouts == 12
    assert report.batches == {"total": 3, "reused": 0, "copied": 0, "run": 3}
    assert report.model["hash"] and report.dataset["content_hash"] and report.verifiers == {"tool_call": "1.5.0"}
    assert report.model["backend"] == "transformers"  # auto: 12 rollouts are too few to pay for vLLM's start
    for key in ("valid_output_rate", "correct_tool_rate", "unsafe_action_rate", "pass@1", "pass@2", "latency_p95_s"):
        assert report.metrics[key].value is not None and report.metrics[key].lo <= report.metrics[key].hi
    assert sum(b.count for b in report.failure_buckets.values()) == 12 - int(a["success"].sum())
    for name in ("report.md", "metrics.png", "failures.png", "rewards.png", "per_task.parquet"):
        assert (tmp_path / "a" / name).is_file()
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["eval-tool-call-heldout"])))
    assert artifacts and "Decision" in artifacts[-1].data
    assert second["batches"]["run"] == 3


@pytest.mark.slow
def test_killed_eval_keeps_finished_batches_and_rerun_does_only_the_rest(tool_dataset, tmp_path) -> None:
    out = tmp_path / "k"
    cmd = [sys.executable, "-m", "flywheel.flows.cli", "eval", "--dataset", tool_dataset, "--out", str(out),
           "--limit", "8", "--batch-size", "2", "--max-tokens", "24"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    while len(list((out / "batches").glob("*.parquet"))) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "batches").glob("*.parquet")}
    assert 2 <= len(done_before) < 4 and not (out / "report.json").exists()
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    report = EvalReport.model_validate_json((out / "report.json").read_text())
    assert report.batches == {"total": 4, "reused": len(done_before), "copied": 0,
                              "run": 4 - len(done_before)}
    assert report.n_rollouts == 8
    for name, (mtime, data) in done_before.items():
        path = out / "batches" / name
        assert path.stat().st_mtime_ns == mtime and path.read_bytes() == data


@pytest.mark.slow
def test_an_eval_copies_the_batches_of_the_same_weights_and_runs_the_rest(tool_dataset, tmp_path) -> None:
    """GRPO's kept start adapter is SFT's weights saved again by another training (its own model card and trainer
    arguments): its eval copies SFT's finished batches (``reuse``) instead of running 1,000 tasks again. Other
    weights, and a batch file there that does not read, run."""
    import shutil

    sft = lora_adapter(tmp_path / "sft", seed=1)
    (sft / "training_args.bin").write_bytes(b"the SFT trainer's arguments")
    start = Path(shutil.copytree(sft, tmp_path / "grpo"))
    (start / "training_args.bin").write_bytes(b"the GRPO trainer's arguments")
    (start / "README.md").write_text("GRPO's model card\n")
    other = lora_adapter(tmp_path / "other", seed=2)

    def report(name: str, model: Path, *reuse: str) -> EvalReport:
        run_eval(EvalConfig(dataset=tool_dataset, out=str(tmp_path / name), model=str(model), limit=2, batch_size=1,
                            max_tokens=16, temperature=0.0, bootstrap=200, backend="transformers", reuse=reuse))
        return EvalReport.model_validate_json((tmp_path / name / "report.json").read_text())

    first = report("a", sft)
    assert first.batches == {"total": 2, "reused": 0, "copied": 0, "run": 2} and first.copied_from == {}
    broken = tmp_path / "broken" / "batches"
    broken.mkdir(parents=True)
    one, two = sorted((tmp_path / "a" / "batches").glob("*.parquet"))
    (broken / one.name).write_bytes(b"not parquet")  # a batch there that does not read runs here
    (broken / two.name).write_bytes(one.read_bytes())  # and so does one holding other tasks' rollouts
    copied = report("b", start, str(broken.parent), str(tmp_path / "a"))
    assert copied.batches == {"total": 2, "reused": 2, "copied": 2, "run": 0}
    assert copied.copied_from == {str(tmp_path / "a"): 2}  # the report names where its rollouts came from
    assert copied.timings == {"load_s": 0.0, "rollouts_s": 0.0}  # no model loaded, no engine started
    assert copied.model["model_id"] == str(start) and copied.model["hash"] == fingerprint(start) != fingerprint(sft)
    a, b = (pl.read_parquet(tmp_path / x / "rollouts.parquet") for x in "ab")
    assert a.equals(b) and first.metrics == copied.metrics
    assert report("c", other, str(tmp_path / "a")).batches == {"total": 2, "reused": 0, "copied": 0, "run": 2}
    linked = tmp_path / "linked" / "batches"
    linked.mkdir(parents=True)
    (linked / one.name).symlink_to(one)  # only plain files are copied: a link could name any file
    (linked / two.name).mkdir()  # a folder named like a batch reads as a parquet dataset: not copied either
    retyped = tmp_path / "retyped" / "batches"
    retyped.mkdir(parents=True)
    for batch, column in ((one, "success"), (two, "seed")):  # the right rows in other types: a cast could forge them
        pl.read_parquet(batch).with_columns(pl.col(column).cast(pl.Float64)).write_parquet(retyped / batch.name)
    folders = (str(broken.parent), str(linked.parent), str(retyped.parent))
    assert report("d", start, *folders).batches == {"total": 2, "reused": 0, "copied": 0, "run": 2}
    assert pl.read_parquet(tmp_path / "d" / "rollouts.parquet").select(STABLE).equals(a.select(STABLE))


@pytest.mark.slow
@pytest.mark.server
def test_eval_through_an_openai_compatible_server(model_server, tool_dataset, tmp_path, prefect_api) -> None:
    summary = _eval(tool_dataset, tmp_path / "o", backend="openai", model="smol", base_url=model_server, concurrency=2)
    report = EvalReport.model_validate_json(Path(summary["report"]).read_text())
    assert report.model["backend"] == "openai" and report.model["hash"] is None and report.n_rollouts == 12
    assert report.metrics["completion_tokens_mean"].value > 0


@pytest.mark.slow
@pytest.mark.server
def test_eval_runs_workplace_agent_episodes(model_server, tmp_path, prefect_api) -> None:
    version = run_generate(GenerateConfig(env="workplace", out=str(tmp_path / "w"), n=40, seed=2,
                                          max_tool_share=1.0))["version_dir"]
    summary = run_eval(EvalConfig(dataset=version, out=str(tmp_path / "we"), limit=2, max_tokens=48, max_steps=2,
                                  backend="openai", model="smol", base_url=model_server, bootstrap=200))
    rows = pl.read_parquet(tmp_path / "we" / "rollouts.parquet")
    assert rows.height == 2 and rows["steps"].max() <= 2
    assert set(rows["finish_reason"]) <= {"answer", "max_steps", "max_tokens"}
    assert summary.metrics["correct_tool_rate"].n == 2


@pytest.mark.integration
def test_eval_bad_options_fail_with_what_to_fix(tmp_path) -> None:
    result = runner.invoke(app, ["eval", "--out", str(tmp_path / "o"), "--dataset", str(tmp_path)])
    assert result.exit_code == 1 and "not a published version folder" in result.output
    (tmp_path / "manifest.json").write_text("{}")
    cases = [
        (["--dataset", str(tmp_path)], "manifest.json is not a dataset manifest"),
        (["--dataset", str(tmp_path), "--backend", "openai"], "--base-url"),
        (["--dataset", str(tmp_path), "--split", "test"], "--split"),
        (["--dataset", str(tmp_path), "--backend", "gpu"], "--backend"),
        (["--dataset", str(tmp_path), "--samples", "0"], "--samples"),
    ]
    cases.append((["--dataset", str(tmp_path), "--samples", "4", "--temperature", "0"], "--temperature > 0"))
    for args, message in cases:
        result = runner.invoke(app, ["eval", "--out", str(tmp_path / "o"), *args])
        assert result.exit_code == 1 and message in result.output, (args, result.output)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_backend_seeds_records_and_eval(tool_dataset, tmp_path) -> None:
    """vllm.LLM in process in the .venv-vllm worker (deploy/install.sh builds it; CI always does)."""
    need_vllm()
    _check_seeded(make_backend("vllm", None))
    summary = _eval(tool_dataset, tmp_path / "v", backend="vllm")  # the same worker: models load once per process
    report = EvalReport.model_validate_json(Path(summary["report"]).read_text())
    assert report.model["backend"] == "vllm" and report.model["hash"] and report.n_rollouts == 12
    # the three batches went to vLLM in one call and came back split into their own files, in plan order
    files = sorted((tmp_path / "v" / "batches").glob("*.parquet"))
    assert [pl.read_parquet(f).height for f in files] == [4, 4, 4] and report.batches == {"total": 3, "reused": 0,
                                                                                            "copied": 0, "run": 3}
    rows = pl.concat([pl.read_parquet(f) for f in files])
    assert rows.select("task_id", "sample").rows() == sorted(rows.select("task_id", "sample").rows())
    assert rows["seed"].to_list() == [rollout_seed(0, t, s) for t, s in rows.select("task_id", "sample").rows()]
    # a PEFT adapter: served merged into its base (no export by hand), the same texts as its merged export
    greedy = Sampling(temperature=0.0, max_tokens=24)
    base = [g.text for g in make_backend("vllm", None).generate(_requests(), greedy)]
    adapter = lora_adapter(tmp_path / "adapter", seed=5)
    served = [g.text for g in make_backend("vllm", str(adapter)).generate(_requests(), greedy)]
    assert served != base, "the adapter's weights must change what the model writes"
    assert not list(cache_root().glob(".merged-*")), "the merged copy is removed once the engine has loaded it"
    summary = _eval(tool_dataset, tmp_path / "va", backend="vllm", model=str(adapter))
    report = EvalReport.model_validate_json(Path(summary["report"]).read_text())
    assert report.model["model_id"] == str(adapter) and report.model["hash"] == fingerprint(adapter)
    merged = str(export_version(adapter, tmp_path / "merged", merged=True))
    assert [g.text for g in make_backend("vllm", merged).generate(_requests(), greedy)] == served
