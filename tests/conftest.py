"""Shared fixtures (one Prefect test harness per session: it costs ~9 s to start) and helpers the tests import."""

from __future__ import annotations

import gc
import os

# FLYWHEEL_VLLM_COMPILE=eager: the vLLM tests check what the backend generates, not the compiler (a first compiled
# start costs a minute more in CI; compiled vs eager is measured in bench/scripts/vllm_startup.py);
# FLYWHEEL_VLLM_MEMORY=0.1: 2.4 GB of RAM reserved is plenty for the embedded model, and the other xdist worker's
# test needs the rest
for _key, _value in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                     "PREFECT_LOGGING_LEVEL": "WARNING", "GX_ANALYTICS_ENABLED": "false",
                     "FLYWHEEL_VLLM_COMPILE": "eager", "FLYWHEEL_VLLM_MEMORY": "0.1"}.items():
    os.environ.setdefault(_key, _value)

if os.environ.get("PYTEST_XDIST_WORKER"):  # three workers share 2 cores: one torch thread each, inherited by the CLI
    for _key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # and servers they start (4 threads on 2 cores spin 3x slower)
        os.environ.setdefault(_key, "1")

import json  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from functools import cache  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402
import pytest  # noqa: E402

from flywheel.schemas import Task  # noqa: E402
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task  # noqa: E402
from flywheel.verifiers.procs import descendants  # noqa: E402  (re-exported: tests import it from here)
from flywheel.verifiers.sandbox import NOBODY  # noqa: E402

# The slowest files first (per-file totals of a full run, then of the unit tier): the xdist workers (pyproject's
# addopts, --dist loadfile, files in this order) take them early and finish together instead of one running a long
# file alone at the end (a long file left out of this list ran its minutes alone after the other workers had finished).
SLOWEST_FIRST = ["flows/test_eval.py", "flows/test_operations.py", "tasks/training/test_train.py",
                 "tasks/training/test_vllm_rollout.py", "flows/test_pipeline.py", "tasks/inference/test_backends.py",
                 "flows/test_flow.py", "tasks/inference/test_prefix_cache.py", "test_packaging.py",
                 "tasks/training/test_episodes.py", "tasks/release/test_registry_races.py",
                 "tasks/release/test_registry.py", "flows/test_prefect_api.py",
                 "tasks/inference/test_policy.py", "tasks/data/test_publish.py", "tasks/training/test_margins.py",
                 "tasks/training/test_shared_prefix.py", "schemas/test_schemas_seeds.py", "verifiers/test_bounds.py",
                 "verifiers/envs/sql/test_sql_hacks.py", "verifiers/envs/cli/test_cli_safety.py",
                 "verifiers/test_references.py", "verifiers/test_envs.py", "verifiers/test_regex.py"]


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::")[0].removeprefix("tests/")
    return SLOWEST_FIRST.index(path) if path in SLOWEST_FIRST else len(SLOWEST_FIRST)


# The unit tier (`pytest -m unit`): every test that has none of these marks and asks for none of these fixtures, so a
# plain new test lands in it. A test that loads a model or starts a Prefect API, a server or flywheel processes
# without one of these fixtures is marked ``integration``; `_unit_guard` fails a unit test that starts the CLI or a
# Prefect API as a process, naming the mark to add.
NOT_UNIT_MARKS = ("slow", "server", "gpu", "vllm", "integration")
NOT_UNIT_FIXTURES = {"prefect_api", "tool_dataset", "workplace_dataset", "model_server"}


def _is_unit(item: pytest.Item) -> bool:
    return (not any(item.get_closest_marker(name) for name in NOT_UNIT_MARKS)
            and not NOT_UNIT_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the unit mark must be on the items by then
def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``gpu`` run where CUDA is present and are skipped, with the reason, everywhere else; the slowest
    files are collected first (a stable sort: the order inside each file stays as written); unit tests get ``unit``."""
    items.sort(key=_rank)
    for item in items:
        if _is_unit(item):
            item.add_marker(pytest.mark.unit)
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs CUDA (no GPU on this machine)"))


def _starts_cli_or_api(args: Any) -> bool:
    """Whether a process started with ``args`` is the flywheel CLI or a uvicorn server (the temporary Prefect API)."""
    words = args.split() if isinstance(args, (str, bytes)) else list(args)
    words = [os.fsdecode(w) for w in words]
    modules = {b for a, b in zip(words, words[1:]) if a == "-m"}
    return bool(words) and (Path(words[0]).name == "flywheel" or bool(modules & {"flywheel.flows.cli", "uvicorn"}))


@pytest.fixture(autouse=True)
def _unit_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test in the unit tier that starts the CLI or a Prefect API as a process fails, saying which mark to add."""
    if request.node.get_closest_marker("unit") is None:
        return
    execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def guarded(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> Any:
        if _starts_cli_or_api(args):
            pytest.fail(f"a unit test started {str(args)[:100]}: mark it integration (tests/conftest.py)",
                        pytrace=False)
        return execute(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", guarded)


@pytest.fixture(scope="session")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _built_once(tmp_path_factory, name: str, config: dict) -> str:
    """A dataset published once per test run and shared by the xdist workers (each used to build its own: up to a
    minute of CI per worker): the first worker to ask builds it under a lock in the run's common temp folder, the
    others wait for the lock and read its path (same seed, same rows). Tests never write into it (they copy it)."""
    from filelock import FileLock

    from flywheel.flows.config import GenerateConfig
    from flywheel.flows.generate import run_generate

    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    done = root / f"{name}.path"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            built = run_generate(GenerateConfig(out=str(root / name), **config))["version_dir"]
            done.write_text(built)
        return done.read_text()


@pytest.fixture(scope="session")
def tool_dataset(tmp_path_factory, prefect_api) -> str:
    """One small published tool_call version (80 rows) shared by the eval and training tests."""
    return _built_once(tmp_path_factory, "tool_dataset", {"n": 80, "seed": 3})


@pytest.fixture(scope="session")
def workplace_dataset(tmp_path_factory, prefect_api) -> str:
    """One small published workplace version (16 rows) shared by the multi-turn training and ingest tests."""
    return _built_once(tmp_path_factory, "workplace_dataset", {"env": "workplace", "n": 16, "seed": 4})


@pytest.fixture(scope="session")
def catalog():
    seeds_path, tools_path = env_paths("tool_call")
    tools = load_tools(tools_path)
    return tools, load_seeds(seeds_path, tools)


@cache
def env_catalog(env: str) -> tuple[Any, Any]:
    """An env's tools (empty where it has none) and its seeds, read once per worker."""
    seeds_path, tools_path = env_paths(env)
    tools = load_tools(tools_path) if tools_path.is_file() else {}
    return tools, load_seeds(seeds_path, tools)


def seeded(env: str, seed_id: str) -> Task:
    """The task of an env's seed ``seed_id``, as the seed catalog renders it."""
    tools, seeds = env_catalog(env)
    return seed_task(next(s for s in seeds if s.id == seed_id), tools)


# A registry version's fields (name, base model, dataset, verifiers, training) for tests that register versions.
REGISTRY_FIELDS = {
    "name": "tool_call-policy", "base_model": {"ref": "embedded", "hash": "b" * 64},
    "dataset": {"name": "tool_call", "version": "v-x", "content_hash": "c" * 64, "seeds_hash": "s" * 64},
    "verifiers": {"tool_call": "1.0.0"}, "training": {"method": "sft"}}


def fake_adapter(root: Path, i: int) -> Path:
    """A PEFT-shaped folder (what the registry checks and hashes); the content differs per i."""
    folder = root / f"a{i}"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4, "i": i}))
    (folder / "adapter_model.safetensors").write_bytes(bytes([i]) * 64)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc ("R", "S", "Z"...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie has ended; its new parent has not reaped it yet."""
    return proc_state(pid) not in (None, "Z")


@contextmanager
def cli_server(args: list[str], ready_path: str, timeout_s: float = 180) -> Iterator[str]:
    """Run ``flywheel ARGS --port P`` as a real server on 127.0.0.1; yields its base URL once ``ready_path``
    answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flywheel.flows.cli", *args, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout_s
    try:
        while True:
            try:
                if httpx.get(base + ready_path, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise RuntimeError(proc.stderr.read().decode()[-2000:]) from None
                if time.time() > deadline:
                    raise TimeoutError(f"flywheel {' '.join(args)} did not answer in {timeout_s} s") from None
                time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def one_line_error(response: Any, status: int, fragment: str) -> None:
    """``response`` is a ``status`` whose detail is one short line holding ``fragment``, with no traceback."""
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and len(detail) < 400 and "Traceback" not in detail
    assert fragment in detail, detail


@pytest.fixture(scope="session")
def model_server() -> Iterator[str]:
    """The embedded model behind ``flywheel serve`` (OpenAI-compatible), once per session; yields .../v1."""
    with cli_server(["serve", "--name", "smol"], "/v1/models") as base:
        yield base + "/v1"


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """fn() run in a thread; fails the test (instead of hanging it) when it takes longer than ``seconds``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as err:  # re-raised in the test's thread
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["result"]


def cpu_seconds(fn: Callable[[], Any]) -> tuple[Any, float]:
    """fn()'s result and the CPU seconds of this thread it took, without a garbage collection of the worker's heap:
    the cost of fn itself. CI's wall time stretches with the load (three workers on two cores: 0.08 s read 0.56),
    and its process time counts other threads and a full collection of what earlier tests left in the worker (a
    0.08 s safety check read 1.35 s)."""
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()
        result = fn()
        return result, time.thread_time() - started
    finally:
        gc.enable()


@contextmanager
def silent_listener() -> Iterator[tuple[socket.socket, int]]:
    """A real 127.0.0.1 server socket that never accepts nor answers: a fetch of its URL would hang forever."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server, server.getsockname()[1]
    finally:
        server.close()


def sandbox_processes() -> list[str]:
    """Processes a sandbox of this test could have left on the host: bwrap or anything running as nobody (we are
    root) that is our descendant or was orphaned onto the host's init (others' sandboxes on the machine are not)."""
    ours = set(descendants(os.getpid()))
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        sandboxed = "--unshare-pid" in cmd or (os.geteuid() == 0 and int(status["Uid"].split()[0]) == NOBODY)
        if sandboxed and (int(pid) in ours or int(status["PPid"]) == 1):
            found.append(f"{pid}: {cmd[:80]}")
    return found


def eval_dir(folder: Path, catalog, good_every: int, limit: int | None = None, bootstrap: int = 200,
             adapter: Path | None = None) -> Path:
    """A `flywheel eval` OUT folder whose rollouts come from the real verifier on the tool_call seeds (the first
    ``limit``): every good_every-th task answered right, the rest not a call. ``adapter``: the model it names (by
    its files' hashes, as `flywheel eval` does), so `flywheel promote` takes it as an eval of that adapter."""
    import polars as pl

    from flywheel.flows.config import EvalConfig
    from flywheel.flows.eval import make_report, write_outputs
    from flywheel.tasks.data.seeds import seed_task
    from flywheel.tasks.data.validate import reference_completion
    from flywheel.tasks.evaluation.metrics import outcome
    from flywheel.tasks.evaluation.rollouts import ROLLOUT_SCHEMA, _row, plan
    from flywheel.verifiers.envs.tool_call import tool_call

    tools, seeds = catalog
    tasks = [seed_task(s, tools) for s in seeds if s.call][:limit]
    rows = []
    for ti, sample, seed in plan([t.id for t in tasks], 1, run_seed=0):
        task = tasks[ti]
        text = reference_completion(task) if good_every and ti % good_every == 0 else "not a call"
        verdict = tool_call.verify(task, text)
        rows.append(_row(task, task.reference.calls[0].tool, sample, seed, text, verdict, 0.5, (90, 12), "stop", 1,
                         outcome(task.env, verdict, 1.0)))
    frame = pl.DataFrame(rows, schema=ROLLOUT_SCHEMA)
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")  # EvalConfig wants --dataset to look published
    config = EvalConfig(dataset=str(folder), out=str(folder), bootstrap=bootstrap)
    dataset = {"name": "tool_call", "version": "v-x", "content_hash": "c" * 64, "path": "ds"}
    model = {"ref": "embedded", "backend": "transformers", "model_id": "m", "hash": "h"}
    if adapter is not None:
        from flywheel.tasks.inference.models import fingerprints

        every, weights = fingerprints(adapter)
        model = {"ref": str(adapter), "backend": "transformers", "model_id": str(adapter), "hash": every,
                 "weights": weights}
    report = make_report(config, frame, dataset, model, {"tool_call": "1.0.0"}, {"total": 1, "reused": 0, "run": 1},
                         {})
    write_outputs(folder, report, frame)
    return folder


def restamp(folder: Path) -> Path:
    """Make an eval folder's report.json name its (edited) rollouts.parquet again, as a forger who edits both would."""
    import json

    from flywheel.tasks.data.publish import file_sha256

    report = json.loads((folder / "report.json").read_text())
    if "rollouts_sha256" in report:  # (a report from before the field names none)
        report["rollouts_sha256"] = file_sha256(folder / "rollouts.parquet")
        (folder / "report.json").write_text(json.dumps(report))
    return folder


def need_vllm() -> None:
    """Skip a vLLM test where .venv-vllm is missing; fail it in CI, which always builds it."""
    from flywheel.tasks.inference.vllm_worker import vllm_python

    if not vllm_python().exists():
        if os.environ.get("CI"):
            pytest.fail("CI must build .venv-vllm: run `bash deploy/install.sh`")
        pytest.skip("no .venv-vllm here: `bash deploy/install.sh` builds it")


def lora_adapter(folder: Path, seed: int) -> Path:
    """A real LoRA adapter of the embedded model with random A and B (init_lora_weights=False), so it changes what
    the model writes; different seeds give different weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from flywheel.tasks.inference.models import embedded_checkpoint

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(embedded_checkpoint())
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    peft.save_pretrained(folder)
    return folder


@contextmanager
def raw_http_server(body: bytes = b"", trickle: bool = False, length: int | None = None) -> Iterator[str]:
    """A 127.0.0.1 server that answers every request 200 with ``body`` (Content-Length ``length``, default its
    size) or, with ``trickle``, one byte of body every 0.2 s for ever; yields its .../v1 URL."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def read_request(conn: socket.socket) -> None:
        """The whole request, headers and body: closing with part of it unread makes the kernel reset the
        connection, and the client then loses the reply it had not read yet."""
        data = b""
        while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        declared = re.search(rb"content-length:\s*(\d+)", head, re.I)
        while declared and len(rest) < int(declared.group(1)) and (chunk := conn.recv(65536)):
            rest += chunk

    def answer(conn: socket.socket) -> None:
        read_request(conn)
        size = length if length is not None else (100_000 if trickle else len(body))
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
                     .encode())
        if trickle:
            while not stop.wait(0.2):
                conn.sendall(b" ")
        else:
            conn.sendall(body)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            try:
                answer(conn)
            except OSError:
                pass
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    finally:
        stop.set()
        server.close()
