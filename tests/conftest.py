"""Shared fixtures: one Prefect test harness per session (it costs ~9 s to start)."""

from __future__ import annotations

import os

for _key, _value in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                     "PREFECT_LOGGING_LEVEL": "WARNING", "GX_ANALYTICS_ENABLED": "false"}.items():
    os.environ.setdefault(_key, _value)

import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import httpx  # noqa: E402
import pytest  # noqa: E402

from tasks.seeds import env_paths, load_seeds, load_tools  # noqa: E402


@pytest.fixture(scope="session")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def tool_dataset(tmp_path_factory, prefect_api) -> str:
    """One small published tool_call version (80 rows) shared by the eval and training tests."""
    from flows.config import GenerateConfig
    from flows.generate import run_generate

    return run_generate(GenerateConfig(out=str(tmp_path_factory.mktemp("ds")), n=80, seed=3))["version_dir"]


@pytest.fixture(scope="session")
def catalog():
    seeds_path, tools_path = env_paths("tool_call")
    tools = load_tools(tools_path)
    return tools, load_seeds(seeds_path, tools)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def cli_server(args: list[str], ready_path: str, timeout_s: float = 180) -> Iterator[str]:
    """Run ``flywheel ARGS --port P`` as a real server on 127.0.0.1; yields its base URL once ``ready_path`` answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *args, "--port", str(port)],
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


@pytest.fixture(scope="session")
def model_server() -> Iterator[str]:
    """The embedded model behind ``flywheel serve`` (OpenAI-compatible), once per session; yields .../v1."""
    with cli_server(["serve", "--name", "smol"], "/v1/models") as base:
        yield base + "/v1"
