"""The dataset flow on a real multi-process Dask cluster (``dask scheduler`` + ``dask worker`` on 127.0.0.1),
including a worker killed in the middle of a stage: the run still completes with the same bytes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port
from flywheel.flows.config import GenerateConfig
from flywheel.flows.generate import run_generate

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.usefixtures("prefect_api")]
DASK = str(Path(sys.executable).with_name("dask"))
HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def _wait_workers(address: str, n: int, timeout: float = 90) -> None:
    from distributed import Client

    with Client(address, timeout="30s") as client:
        client.wait_for_workers(n, timeout=timeout)


def test_dataset_flow_on_a_dask_cluster_survives_a_killed_worker(tmp_path) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    marker = tmp_path / "killed"
    env = {**os.environ, "DIE_ONCE_MARKER": str(marker), "PYTHONPATH": str(HELPERS.parents[1])}
    common = ["--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"]
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                               "--no-dashboard"], stderr=subprocess.DEVNULL)]
    try:
        time.sleep(1)
        procs.append(subprocess.Popen([DASK, "worker", address, *common], stderr=subprocess.DEVNULL, env=env))
        procs.append(subprocess.Popen([DASK, "worker", address, *common, "--preload",
                                       str(HELPERS / "dask_die_once.py")],
                                      stderr=subprocess.DEVNULL, env=env))
        _wait_workers(address, 2)
        params = {"n": 200, "seed": 5, "partition_size": 40}
        remote = run_generate(GenerateConfig(out=str(tmp_path / "remote"), dask_address=address, **params))
        assert marker.exists(), "the worker with the preload never ran a task: the kill was not exercised"
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    local = run_generate(GenerateConfig(out=str(tmp_path / "local"), workers=2, **params))
    remote_dir, local_dir = Path(remote["version_dir"]), Path(local["version_dir"])
    assert remote_dir.name == local_dir.name  # same content hash: nothing lost or duplicated by the kill
    for name in ("train.parquet", "heldout.parquet"):
        assert (remote_dir / name).read_bytes() == (local_dir / name).read_bytes()
    assert [p.name for p in remote_dir.parent.iterdir()] == [remote_dir.name]
