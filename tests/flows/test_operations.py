"""The operations stack as a user runs it: deploy/postgres.sh (Debian's PostgreSQL on 127.0.0.1), deploy/start.sh
(Prefect server on that database, work pools, the gpu concurrency limit, deploy/prefect.yaml, workers), runs
triggered through the API, and kills of the worker and the server in the middle of a run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import free_port, proc_state
from flywheel.tasks.data.publish import read_manifest

pytestmark = [pytest.mark.slow, pytest.mark.server]
ROOT = Path(__file__).resolve().parents[2]
STAGES = {"generate-variants", "exact-dedupe", "validate", "near-dedupe", "quality-suite", "split-decontaminate"}


def _sh(*args: str, env: dict | None = None) -> str:
    done = subprocess.run(["bash", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{args}: {done.stdout[-1500:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[dict]:
    home = tmp_path_factory.mktemp("home")
    pg = Path(tempfile.mkdtemp(prefix="flywheel-pg-"))  # pytest's folders are private: user postgres cannot enter
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    pg_port = free_port()
    url = _sh("deploy/postgres.sh", "start", str(pg), str(pg_port)).strip().splitlines()[-1]
    port = free_port()
    start = ["deploy/start.sh", "--home", str(home), "--port", str(port), "--db", url]
    try:
        try:
            out = _sh(*start, env=env)
        except AssertionError as err:  # the server could not start: say what the database did
            log = pg / "postgres.log"
            tail = log.read_text()[-3000:] if log.exists() else "none"
            raise AssertionError(f"{err}\npostgres.log:\n{tail}") from err
        assert f"Prefect UI: http://127.0.0.1:{port}" in out
        yield {"home": home, "api": f"http://127.0.0.1:{port}/api", "start": start, "env": env, "db": url,
               "pg": (pg, pg_port)}
    finally:
        subprocess.run(["bash", "deploy/stop.sh", "--home", str(home)], cwd=ROOT, timeout=120)
        subprocess.run(["bash", "deploy/postgres.sh", "stop", str(pg)], cwd=ROOT, timeout=120)
        shutil.rmtree(pg, ignore_errors=True)


@contextmanager
def _client(stack: dict) -> Iterator:
    """A sync client bound to the stack's API, whatever this pytest session's default API is."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: stack["api"]}), get_client(sync_client=True) as client:
        yield client


def _trigger(stack: dict, name: str, params: dict):
    with _client(stack) as client:
        deployment = client.read_deployment_by_name(name)
        return client.create_flow_run_from_deployment(deployment.id, parameters=params)


def _wait(stack: dict, run_id, until=lambda run: run.state.is_final(), timeout: float = 400):
    deadline = time.time() + timeout
    with _client(stack) as client:
        while True:
            run = client.read_flow_run(run_id)
            if until(run):
                return run
            assert time.time() < deadline, f"flow run {run.name} still {run.state.type} after {timeout} s"
            time.sleep(1)


def _task_states(stack: dict, run_id) -> dict[str, str]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with _client(stack) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    return {r.name.rsplit("-", 1)[0]: r.state.name for r in runs}


def _artifacts(stack: dict, run_id) -> dict[str, object]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with _client(stack) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    return {a.key or f"{a.type}-{a.id}": a for a in found}


def _versions(stack: dict) -> list[Path]:
    root = Path(stack["home"]) / "datasets" / "tool_call"
    return sorted(p for p in root.iterdir()) if root.is_dir() else []


def test_on_demand_generation_through_the_api_on_postgres_then_from_cache(stack) -> None:
    with _client(stack) as client:
        names = {f"{d.name}" for d in client.read_deployments()}
        limit = client.read_global_concurrency_limit_by_name("gpu")
        pools = {p.name: p.type for p in client.read_work_pools()}
    assert {"on-demand", "nightly", "held-out", "gpu", "gate", "end-to-end"} <= names
    assert limit.limit == 1 and pools == {"cpu": "process", "gpu": "process"}
    first = _wait(stack, _trigger(stack, "generate-dataset/on-demand", {"seed": 7, "n": 60}).id)
    assert first.state.is_completed(), first.state.message
    [version] = _versions(stack)
    manifest = read_manifest(version)
    assert manifest.run_seed == 7 and manifest.counts["train"] + manifest.counts["heldout"] == 60
    artifacts = _artifacts(stack, first.id)
    table = artifacts["dataset-tool-call"].data
    assert "| generate |" in table and version.name in table
    assert (version / "manifest.json").as_uri() in artifacts["dataset-tool-call-manifest"].data
    assert any(a.type == "progress" for a in artifacts.values())
    states = _task_states(stack, first.id)
    assert STAGES <= set(states) and all(states[s] == "Completed" for s in STAGES)

    second = _wait(stack, _trigger(stack, "generate-dataset/on-demand", {"seed": 7, "n": 60}).id)
    assert second.state.is_completed()
    states = _task_states(stack, second.id)
    assert all(states[s] == "Cached" for s in STAGES), states
    assert _versions(stack) == [version]  # same parameters: the same version, published once
    assert "postgresql" in stack["db"]


def _kill_mid_run(stack: dict, pidfile: str, sig: int, params: dict):
    run = _trigger(stack, "generate-dataset/on-demand", params)
    _wait(stack, run.id, until=lambda r: r.state.is_running() and "generate-variants" in _task_states(stack, r.id))
    os.kill(int((Path(stack["home"]) / pidfile).read_text()), sig)
    time.sleep(2)
    _sh(*stack["start"], env=stack["env"])  # brings back whatever is down; leaves the rest alone
    return run


@pytest.mark.parametrize(("pidfile", "seed"), [("worker-cpu.pid", 21), ("server.pid", 22)])
def test_killed_worker_or_server_then_rerun_loses_and_duplicates_nothing(stack, pidfile: str, seed: int) -> None:
    """SIGKILL mid-run, start.sh brings the process back; the run ends (its flow process outlives the worker and
    retries the API while the server restarts) and a rerun with the same parameters completes: one version."""
    params = {"seed": seed, "n": 400}
    run = _kill_mid_run(stack, pidfile, signal.SIGKILL, params)
    final = _wait(stack, run.id)
    assert final.state.is_completed() or final.state.type.value in {"FAILED", "CRASHED"}, final.state
    rerun = _wait(stack, _trigger(stack, "generate-dataset/on-demand", params).id)
    assert rerun.state.is_completed(), rerun.state.message
    seeds = [read_manifest(v).run_seed for v in _versions(stack)]
    assert seeds.count(seed) == 1, (final.state, seeds)
    assert not list((Path(stack["home"]) / "datasets" / "tool_call").glob(".tmp-*"))
    if final.state.is_completed():
        assert all(s in {"Cached", "Completed"} for s in _task_states(stack, rerun.id).values())


def test_start_brings_back_a_process_whose_pid_is_a_zombie_or_reused(stack) -> None:
    """A killed process its parent has not reaped yet (a zombie: `kill -0` still succeeds; PID 1 of a container or a
    slow VM reaps late) is down: start.sh starts a new one instead of saying "already running" (a CI flake). So is a
    pid now held by another program."""
    pidfile = Path(stack["home"]) / "worker-cpu.pid"
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    zombie = subprocess.Popen(["true"])  # never waited on until the end: a zombie of this process
    try:
        for _ in range(100):
            if proc_state(zombie.pid) == "Z":
                break
            time.sleep(0.05)
        assert proc_state(zombie.pid) == "Z"
        pidfile.write_text(f"{zombie.pid}\n")
        out = _sh(*stack["start"], env=stack["env"])
        assert "worker-cpu already running" not in out
        assert "server already running" in out and "worker-gpu already running" in out  # the live ones are seen
        worker = int(pidfile.read_text())
        assert worker != zombie.pid and proc_state(worker) not in (None, "Z")
    finally:
        zombie.wait()
    # its pid reused by another program (a reboot, a long uptime): down too, and that program is left alone
    os.kill(worker, signal.SIGKILL)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        pidfile.write_text(f"{other.pid}\n")
        out = _sh(*stack["start"], env=stack["env"])
        assert "worker-cpu already running" not in out and "server already running" in out
        assert int(pidfile.read_text()) not in (other.pid, worker) and other.poll() is None
    finally:
        other.kill()
        other.wait()
    # a restart on another port would have rewritten env.sh for a server that stays on its own: refused
    env_sh = (Path(stack["home"]) / "env.sh").read_text()
    start = [*stack["start"]]
    start[start.index("--port") + 1] = "1"
    done = subprocess.run(["bash", *start], cwd=ROOT, capture_output=True, text=True, timeout=60, env=stack["env"])
    port = stack["api"].split(":")[-1].split("/")[0]
    assert done.returncode == 1 and f"runs on 127.0.0.1:{port}, not port 1: nothing changed" in done.stderr
    assert (Path(stack["home"]) / "env.sh").read_text() == env_sh


def test_postgres_start_again_prints_the_running_url_or_refuses_another_port(stack) -> None:
    """postgres.sh start on a running cluster skipped its start and printed a URL for whatever PORT was passed, which
    another server (trust auth) could answer: now the running port's URL, or a refusal naming it."""
    pg, port = stack["pg"]
    assert _sh("deploy/postgres.sh", "start", str(pg), str(port)).strip() == stack["db"]
    other = free_port()
    done = subprocess.run(["bash", "deploy/postgres.sh", "start", str(pg), str(other)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.strip() == f"the PostgreSQL in {pg} already runs on port {port}, not {other}: pass {port}, " \
                                  "or stop it first"


def test_pipeline_runs_training_and_promotion_as_gpu_pool_deployments(stack) -> None:
    """`flywheel-run/end-to-end` on the stack, reduced, on workplace: SFT and GRPO run as the train-policy/gpu
    deployment and the gate as promote/gate; the run's own checks are those of a workplace run (one run for both, to
    keep CI short): a workplace dataset, agent-episode evals of the same rollouts, SFT on gold episodes, GRPO on
    whole episodes (two prompts a step, one group per pass; their counts in the log), `curriculum both` balanced,
    the gate on tokens per call, not seconds. The tool_call run through the CLI: tests/flows/test_pipeline.py."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    out = Path(stack["home"]) / "runs" / "tiny"
    params = {"out": str(out), "env": "workplace", "seed": 1, "n": 20, "heldout_fraction": 0.3, "eval_limit": 4,
              "sft_steps": 1, "grpo_steps": 1, "num_generations": 2, "grpo_prompts": 2, "max_tokens": 16,
              "train_limit": 2, "refill": 1, "curriculum": "both", "curriculum_tasks": 2, "capability_tasks": 0,
              "curriculum_balance": True,
              "validation_tasks": 1, "gpu_pool": "gpu", "grpo_learning_rate": 5e-5,
              "check_interval": 1}  # the last two reach GRPO's config; capability checks: test_pipeline.py
    run = _wait(stack, _trigger(stack, "flywheel-run/end-to-end", params).id, timeout=900)
    assert run.state.is_completed(), run.state.message
    with _client(stack) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id])))
        deployments = {d.id: f"{d.name}@{d.work_pool_name}" for d in client.read_deployments()}
    launched = sorted(deployments[c.deployment_id] for c in children if c.deployment_id)
    assert launched == ["gate@cpu", "gpu@gpu", "gpu@gpu"]  # SFT and GRPO on the gpu pool, then the gate
    summary = json.loads((out / "summary.json").read_text())
    assert (set(summary["stages"]) == {"sft", "grpo"} and summary["config"]["env"] == "workplace"
            and summary["gate"]["version"] == summary["stages"][summary["promoted_stage"]]["version"])
    manifest = json.loads((Path(summary["dataset"]) / "manifest.json").read_text())
    assert manifest["params"]["heldout_fraction"] == 0.3 and manifest["env"] == "workplace"
    assert (out / "registry").is_dir() and "gate-report" in _artifacts(stack, next(
        c.id for c in children if deployments.get(c.deployment_id) == "gate@cpu"))
    _check_workplace_run(out, summary)


def _check_workplace_run(out: Path, summary: dict) -> None:
    import polars as pl

    from flywheel.tasks.release.registry import Registry

    keys = []
    for name, ev in summary["evals"].items():
        rollouts = pl.read_parquet(Path(ev["report"]).parent / "rollouts.parquet")
        keys.append(rollouts.select("task_id", "sample", "seed").sort("task_id").rows())
        assert rollouts["steps"].min() >= 1 and rollouts.height == 4, name  # agent episodes
    assert list(summary["evals"]) == ["baseline", "after SFT", "after GRPO"] and keys[0] == keys[1] == keys[2]
    start, *grpo = [json.loads(x) for x in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert start["step"] == 0 and "val_success" in start  # the start adapter's validation check
    assert grpo[0]["episode_steps"] >= 1 and "rollout_s" in grpo[0] and "rewards/workplace_reward/mean" in grpo[0]
    # two prompts a step, one group per forward/backward pass (gradient accumulation); at most one redraw each
    assert grpo[0]["groups"] == 2 and grpo[0]["groups_dropped"] <= 2
    config = json.loads((out / "grpo" / "train_config.json").read_text())
    assert [config[k] for k in ("micro_batch", "learning_rate", "check_interval")] == [2, 5e-5, 1]
    # curriculum both: one greedy answer per task (2 here) and 4 samples each; GRPO on the tasks either picks
    curriculum = pl.read_parquet(out / "curriculum" / "per_task.parquet")
    sampled = pl.read_parquet(out / "curriculum-sampled" / "per_task.parquet")
    wrong = set(curriculum.filter(pl.col("mark") == "never")["task_id"])
    either = wrong | set(sampled.filter(pl.col("mark") == "mixed")["task_id"])
    assert curriculum.height == 2 and summary["curriculum"].startswith(f"{len(wrong)} of 2 train tasks answered wrong")
    assert sampled.height == 2 and (sampled["samples"] == 4).all()
    assert config["train_on"] == "failures"  # SFT has no curriculum: its config says so
    assert json.loads((out / "sft" / "train_config.json").read_text())["train_on"] == "mixed"
    union, balanced = out / "curriculum" / "failures_and_mixed.parquet", out / "curriculum" / "balanced.parquet"
    assert config["skip_tasks"] == (str(balanced) if either else None)  # --curriculum-balance: the union, cut
    assert set(pl.read_parquet(union).filter(pl.col("mark") == "mixed")["task_id"]) == either
    if either:
        picks = set(pl.read_parquet(balanced).filter(pl.col("mark") == "mixed")["task_id"])
        assert picks and picks <= either and "balanced by decision" in summary["curriculum"]
    assert "val_success" in grpo[0] and summary["stages"]["grpo"]["selected_step"] in (0, 1)  # agent episodes
    reg = Registry(summary["registry"])
    assert set(reg.version(summary["stages"]["grpo"]["version"]).verifiers) == {"workplace"}
    gate = json.loads(Path(summary["gate"]["report"]).with_suffix(".json").read_text())
    checks = {(c["name"], c["scope"]): c for c in gate["result"]["checks"]}
    assert checks[("tokens_per_call_p95", "overall")]["gated"] and not checks[("latency_p95_s", "overall")]["gated"]


def test_nightly_schedule_materialises_runs_after_a_server_restart(stack) -> None:
    """The scheduler service inserts the cron deployment's runs in bulk; SQLAlchemy 2.1 broke that insert in Prefect
    3.8.8 and the restarted server exited (CI, stop 19). Runs after the kill tests, so the server has restarted."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    deadline = time.time() + 180
    while True:
        with _client(stack) as client:
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["nightly"])))
        if runs:
            break
        assert time.time() < deadline, "the nightly cron deployment has no scheduled run after 180 s"
        time.sleep(3)
    assert all(r.state.is_scheduled() and r.expected_start_time.hour == 2 for r in runs)


def test_stop_lets_a_running_flow_run_finish_then_leaves_nothing_running(stack) -> None:
    """Last (it stops the stack): deploy/stop.sh on a worker with a flow run under it waits for the run, which
    publishes its version; the idle worker and the server stop; no process of the stack is left, no pid file. The
    grace is 240 s, not the default 30: under CI's load the 100-row run took longer than 30 s (stop.sh then kills the
    worker and the run goes on without it, as its header says), and this checks the wait, not the machine."""
    home = Path(stack["home"])
    pids = {name: int((home / f"{name}.pid").read_text()) for name in ("worker-cpu", "worker-gpu", "server")}
    before = _versions(stack)
    run = _trigger(stack, "generate-dataset/on-demand", {"seed": 23, "n": 100})
    _wait(stack, run.id, until=lambda r: r.state.is_running() and "generate-variants" in _task_states(stack, r.id))
    _sh("deploy/stop.sh", "--home", str(home), "--grace", "240")
    new = [v for v in _versions(stack) if v not in before]
    assert [read_manifest(v).run_seed for v in new] == [23], (run.name, new)
    assert not list((home / "datasets" / "tool_call").glob(".tmp-*"))
    assert all(proc_state(pid) in (None, "Z") for pid in pids.values()), pids
    assert not list(home.glob("*.pid"))
