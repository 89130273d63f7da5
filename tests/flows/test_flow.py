"""The dataset flow on Prefect + Dask: determinism across worker counts, caching, failures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from flywheel.flows.config import GenerateConfig
from flywheel.flows.generate import DatasetError, run_generate
from flywheel.tasks.data.publish import read_manifest
from flywheel.tasks.data.seeds import env_paths

pytestmark = pytest.mark.usefixtures("prefect_api")
STAGES = ["generate-variants", "exact-dedupe", "validate", "near-dedupe", "quality-suite", "split-decontaminate"]


def _run(tmp_path: Path, tag: str, **kw) -> dict:
    params = {"n": 240, "seed": 11, "workers": 2, "partition_size": 100} | kw
    return run_generate(GenerateConfig(out=str(tmp_path / tag), **params))


def test_same_seed_same_bytes_with_one_or_two_workers(tmp_path) -> None:
    one = Path(_run(tmp_path, "one", workers=1)["version_dir"])
    two = Path(_run(tmp_path, "two", workers=2)["version_dir"])
    for name in ("train.parquet", "heldout.parquet"):
        assert (one / name).read_bytes() == (two / name).read_bytes()
    m1, m2 = read_manifest(one), read_manifest(two)
    assert m1.content_hash == m2.content_hash and one.name == two.name
    train, held = pl.read_parquet(one / "train.parquet"), pl.read_parquet(one / "heldout.parquet")
    assert train.height + held.height == 240 and held.height > 0
    assert set(train["group_id"]).isdisjoint(set(held["group_id"])), "a near-dup group straddles the split"
    assert m1.counts["train"] == train.height and m1.run_seed == 11
    assert sum(m1.reject_reasons.values()) == pl.read_parquet(one / "rejected.parquet").height
    assert json.loads((one / "quality.json").read_text())["success"] is True
    other = Path(_run(tmp_path, "other", seed=12)["version_dir"])
    assert read_manifest(other).content_hash != m1.content_hash


def test_rerun_is_served_from_cache_and_late_change_recomputes_only_its_stage(tmp_path) -> None:
    first = _run(tmp_path, "c", n=120)
    assert first["cache_hits"] == []
    again = _run(tmp_path, "c", n=120)
    assert again["cache_hits"] == STAGES and again["version_dir"] == first["version_dir"]
    late = _run(tmp_path, "c", n=120, heldout_fraction=0.3)
    assert late["cache_hits"] == STAGES[:-1]
    assert late["version_dir"] != first["version_dir"]
    shutil.rmtree(tmp_path / "c" / ".cache" / "stages")  # cached results whose files are gone are recomputed
    assert _run(tmp_path, "c", n=120)["version_dir"] == first["version_dir"]


def test_zero_accepted_rows_fail_with_reason_counts(tmp_path) -> None:
    seeds_path, tools_path = env_paths("tool_call", GenerateConfig(n=1, out="x").seeds_dir)
    bad = tmp_path / "seeds"
    bad.mkdir()
    shutil.copy(tools_path, bad / "tool_call.tools.json")
    seed = json.loads(seeds_path.read_text().splitlines()[3])  # cal-list-1: {"date": "{date}"}
    seed["slots"] = {"date": "time"}  # a time where the schema wants a date: every reference breaks the schema
    (bad / "tool_call.jsonl").write_text(json.dumps(seed) + "\n")
    with pytest.raises(DatasetError, match=r"0 rows accepted out of 20 candidates.*validate:args_schema_violation"):
        _run(tmp_path, "z", n=10, max_candidates=20, seeds_dir=str(bad))
    assert not (tmp_path / "z" / "tool_call").exists() or not any((tmp_path / "z" / "tool_call").glob("v-*"))


@pytest.mark.slow
def test_killed_run_leaves_no_version_and_rerun_completes(tmp_path) -> None:
    out = tmp_path / "k"
    cmd = [sys.executable, "-m", "flywheel.flows.cli", "generate", "--n", "3000", "--seed", "5", "--out", str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while not list((out / ".cache" / "stages").glob("validate-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI, its Prefect server and its Dask workers
    proc.wait()
    assert not list((out / "tool_call").glob("v-*")) if (out / "tool_call").exists() else True
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    version = Path(done.stdout.strip().splitlines()[-1])
    assert version.parent == out / "tool_call" and read_manifest(version).counts["train"] > 0
    assert [p.name for p in (out / "tool_call").iterdir()] == [version.name]


@pytest.mark.slow
def test_runs_on_a_given_dask_scheduler_and_publishes_an_artifact(tmp_path) -> None:
    from distributed import LocalCluster
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        remote = _run(tmp_path, "remote", n=120, dask_address=cluster.scheduler_address)
    local = _run(tmp_path, "local", n=120)
    assert Path(remote["version_dir"]).name == Path(local["version_dir"]).name
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["dataset-tool-call"])))
    assert artifacts and "| generate |" in artifacts[-1].data and "Version" in artifacts[-1].data


def test_the_local_dask_cluster_leaves_this_process_environment_as_it_found_it(monkeypatch) -> None:
    """Dask's nanny sets OMP_NUM_THREADS=1 (and more) for its workers in the parent's os.environ; a vLLM worker or
    a torch imported after the dataset flow inherited it and ran on one thread
    (bench/results/throughput.md#vllm-after-dask)."""
    from flywheel.flows.runtime import dask_client

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_",
                 "PYTHONHASHSEED"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    with dask_client(1, None) as client:
        assert client.submit(os.getenv, "OMP_NUM_THREADS", pure=False).result() == "1"  # the workers keep it
        assert dict(os.environ) == before
    assert dict(os.environ) == before


def test_the_local_dask_clusters_workers_print_no_traceback_yet_a_task_error_still_reaches_the_caller(capfd) -> None:
    """On a busy machine a worker missed a heartbeat (or was killed mid-heartbeat at close) and printed a traceback
    into a newcomer's successful run (CI, thirty-first session). The workers inherit this process's stderr."""
    import logging

    from flywheel.flows.runtime import dask_client

    level = logging.getLogger("distributed").level
    with dask_client(1, None) as client:
        levels = client.run(lambda: logging.getLogger("distributed.worker").getEffectiveLevel())
        assert set(levels.values()) == {logging.CRITICAL}
        client.run(lambda: logging.getLogger("distributed.worker").error("Failed during heartbeat (a probe)"))
        with pytest.raises(ValueError, match="invalid literal"):
            client.submit(int, "not a number", pure=False).result()
    assert "a probe" not in capfd.readouterr().err
    assert logging.getLogger("distributed").level == level


def test_a_second_local_cluster_at_once_prints_no_port_warning() -> None:
    """Every LocalCluster's scheduler serves HTTP on 127.0.0.1:8787 even without a dashboard; a second flywheel
    command running at once printed "Port 8787 is already in use. Perhaps you already have a cluster running?"."""
    import socket
    import warnings

    from flywheel.flows.runtime import dask_client

    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", 8787))
            holder.listen(1)
        except OSError:
            pass  # something holds it already: the same situation
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with dask_client(1, None) as client:
                assert client.submit(abs, -2, pure=False).result() == 2
    assert [str(w.message) for w in seen if "already in use" in str(w.message)] == []


@pytest.mark.slow
def test_parent_versions_are_deduplicated_against(tmp_path) -> None:
    parent = Path(_run(tmp_path, "p", n=60)["version_dir"])
    child = _run(tmp_path, "p", n=60, name="child", parents=(str(parent),))  # same seed: same first candidates
    assert child["reject_reasons"].get("near_dedupe:near_duplicate_of_reference", 0) >= 60
    old = set(pl.concat([pl.read_parquet(parent / f"{s}.parquet") for s in ("train", "heldout")])["id"])
    new = pl.concat([pl.read_parquet(Path(child["version_dir"]) / f"{s}.parquet") for s in ("train", "heldout")])
    assert new.height == 60 and old.isdisjoint(set(new["id"]))
    assert read_manifest(Path(child["version_dir"])).parents == (str(parent),)


def test_failing_quality_suite_fails_the_run_and_publishes_nothing(tmp_path) -> None:
    with pytest.raises(DatasetError,
                       match=r"data-quality suite failed: expect_column_values_to_be_between\(tool_share\)"):
        _run(tmp_path, "q", n=60, max_tool_share=0.01)
    assert not (tmp_path / "q" / "tool_call").exists()


@pytest.mark.slow
@pytest.mark.parametrize("env", ["math", "cli", "workplace", "code"])
def test_flow_publishes_other_envs(tmp_path, env: str) -> None:
    summary = _run(tmp_path, env, env=env, n=80)
    manifest = read_manifest(Path(summary["version_dir"]))
    assert manifest.env == env and manifest.counts["train"] + manifest.counts["heldout"] == 80
    held = pl.read_parquet(Path(summary["version_dir"]) / "heldout.parquet")
    assert held.height > 0 and set(held["env"]) == {env}
