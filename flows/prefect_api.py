"""The temporary Prefect API for CLI runs without a server: started by us, so it never times out and never outlives us.

Contract:
- ``temporary_api()`` does nothing when ``PREFECT_API_URL`` names a server. Otherwise it starts Prefect's own API app
  (``prefect.server.api.server:create_app`` under uvicorn, on 127.0.0.1, UI off: what Prefect's ephemeral mode runs)
  and points this process and its children at it for the duration.
- Start-up waits as long as the server process is alive (up to ``START_LIMIT_S``): a fresh PREFECT_HOME's database
  migrations on a busy machine outlast Prefect's own 20 s start-up timeout, which made first runs fail.
- The server process gets ``PR_SET_PDEATHSIG`` = SIGKILL, so a SIGKILLed command takes it along (Prefect's own
  ephemeral server is stopped by ``atexit`` only, which a SIGKILL skips). Dask workers already die with their
  parent (distributed watches the parent's pipe); the code sandbox uses bwrap's ``--die-with-parent``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator
from contextlib import contextmanager

import httpx

START_LIMIT_S = 600.0
_PR_SET_PDEATHSIG = 1


class PrefectAPIError(RuntimeError):
    """The temporary Prefect API could not start; the message says why."""


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child between fork and exec only calls it


def _die_with_parent() -> None:  # runs in the child between fork and exec: no imports, no dlopen, no allocation
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(log: int) -> tuple[subprocess.Popen[bytes], str]:
    import prefect
    from prefect.settings import get_current_settings

    port = _free_port()
    env = {**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True),
           "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    cmd = [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
           "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "error", "--lifespan", "on"]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            preexec_fn=_die_with_parent)
    return proc, f"http://127.0.0.1:{port}/api"


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, limit_s: float) -> bool:
    """True once /health answers 200; False if the process exits first (e.g. the port was taken meanwhile)."""
    deadline = time.monotonic() + limit_s
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    raise PrefectAPIError(f"the temporary Prefect API did not answer within {limit_s:.0f} s; set PREFECT_API_URL to a "
                          "running server (deploy/start.sh) or free up the machine")


def _send_queued_logs() -> None:
    """Flow-run logs still queued reach this API before it stops (a failed run's last records were sent after, and
    Prefect printed "Error logging to API: All connection attempts failed"). Bounded: 5 s at most."""
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def temporary_api(limit_s: float = START_LIMIT_S) -> Generator[str | None, None, None]:
    """Yield the API URL in use: the configured server's (None) or a temporary one's, stopped on exit."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield None
        return
    with tempfile.TemporaryFile() as log:
        for _ in range(3):  # a port taken between choosing and binding makes uvicorn exit: choose again
            proc, url = _start(log.fileno())
            try:
                if _wait_healthy(proc, url, limit_s):
                    break
            except BaseException:
                _stop(proc)
                raise
        else:
            log.seek(0)
            tail = " ".join(log.read().decode("utf-8", "replace").split()[-40:])
            raise PrefectAPIError(f"the temporary Prefect API exited at start (status {proc.returncode}): {tail}")
        previous = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = url  # child processes (Dask workers, deployments) use the same API
        try:
            with temporary_settings({PREFECT_API_URL: url}):
                yield url
        finally:
            if previous is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = previous
            _send_queued_logs()
            _stop(proc)
