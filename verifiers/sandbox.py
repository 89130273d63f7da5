"""Run untrusted Python in a sandbox and return what it produced for given inputs.

Contract:
- Each run is a separate process tree under bubblewrap (``bwrap``): new PID, network, IPC and UTS namespaces
  (no network at all), a read-only view of the Python installation and system libraries only (no project
  files, no datasets, no home), a fresh size-limited tmpfs as working directory and /tmp, an empty
  environment, and, when the host runs as root, the uid ``nobody`` (so the process-count limit applies and
  host processes cannot be signalled).
- Limits (``prlimit``): CPU seconds, address space, file size, process count, open files, no core dumps; a
  wall-clock timeout on top. Output on the result channel is capped; the candidate's stdout is a capped file.
- When the run ends, every process it started is gone: the PID namespace dies with its first process and
  the whole process group is killed on timeout.
- ``run_code`` never raises for anything the candidate does; it raises ``SandboxError`` only when the sandbox
  itself cannot start (then the verifier reports valid=False, never reward 0).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

HARNESS = (Path(__file__).with_name("harness.py")).read_text(encoding="utf-8")
NOBODY = 65534


class SandboxError(RuntimeError):
    """The sandbox could not run (missing bwrap, namespaces refused): an infrastructure failure."""


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_s: int = Field(2, ge=1, le=600)
    wall_s: float = Field(10.0, gt=0, le=3600)
    memory_mb: int = Field(512, ge=64)
    file_mb: int = Field(1, ge=1)
    nproc: int = Field(8, ge=1)
    tmpfs_mb: int = Field(16, ge=1)
    max_result_kb: int = Field(1024, ge=1)


@dataclass
class RunResult:
    events: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None  # the sandboxed process's exit status (128+N: killed by signal N)
    timed_out: bool = False
    overflow: bool = False
    stderr: str = ""
    seconds: float = 0.0


def bwrap_command(limits: Limits) -> list[str]:
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    if not bwrap or not prlimit:
        raise SandboxError("the code sandbox needs bubblewrap and util-linux's prlimit: run deploy/install.sh "
                           "(as root it installs Debian's bubblewrap) or `apt-get install bubblewrap`")
    python = os.path.realpath(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    tmpfs = str(limits.tmpfs_mb * 1024 * 1024)
    cmd = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
           "--ro-bind", "/usr", "/usr", "--ro-bind-try", "/lib", "/lib", "--ro-bind-try", "/lib64", "/lib64",
           "--ro-bind-try", "/bin", "/bin", "--ro-bind", prefix, prefix, "--proc", "/proc", "--dev", "/dev",
           "--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp",
           "--perms", "0777", "--size", tmpfs, "--tmpfs", "/work", "--chdir", "/work"]
    if os.geteuid() != 0:
        cmd.insert(1, "--unshare-user")  # unprivileged: a user namespace makes the others possible
    mb = 1024 * 1024
    cmd += ["--", prlimit, f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={limits.memory_mb * mb}",
            f"--fsize={limits.file_mb * mb}", f"--nproc={limits.nproc}", "--nofile=64", "--core=0", "--"]
    if os.geteuid() == 0:
        cmd += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                "--clear-groups", "--"]
    return cmd + [python, "-I", "-S", "-c", HARNESS]


def _pump(proc: subprocess.Popen[bytes], payload: bytes, deadline: float, cap: int) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin, read stdout/stderr up to ``cap`` bytes each, until both close or the deadline passes."""
    assert proc.stdin and proc.stdout and proc.stderr
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the sandbox died at start: its stderr says why
    chunks: dict[str, bytearray] = {"out": bytearray(), "err": bytearray()}
    overflow = False
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(chunks["out"]), bytes(chunks["err"]), True, overflow
        for key, _ in sel.select(timeout=left):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fileobj)
                continue
            buf = chunks[key.data]
            if len(buf) + len(data) > cap:
                overflow = True
                return bytes(chunks["out"]), bytes(chunks["err"]), False, overflow
            buf += data
    return bytes(chunks["out"]), bytes(chunks["err"]), False, overflow


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the sandbox from the inside out: its first process inside the namespace (the namespace dies with
    it), then bwrap, which reaps it. Killing bwrap first would orphan that process as a zombie of the host's init."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        try:
            os.kill(int(child), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill_group(proc)


def run_code(code: str, entry_point: str, inputs: list[list[Any]], limits: Limits | None = None) -> RunResult:
    """Run ``entry_point(*args)`` for every ``args`` in ``inputs`` inside a fresh sandbox."""
    limits = limits or Limits()
    payload = json.dumps({"code": code, "entry_point": entry_point, "inputs": inputs}).encode()
    start = time.monotonic()
    proc = subprocess.Popen(bwrap_command(limits), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env={})
    try:
        out, err, timed_out, overflow = _pump(proc, payload, start + limits.wall_s, limits.max_result_kb * 1024)
    finally:
        if proc.poll() is None:
            _stop(proc)  # timeout or flood
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
    result = RunResult(exit_code=proc.returncode, timed_out=timed_out, overflow=overflow,
                       stderr=err.decode("utf-8", "replace")[:2000], seconds=time.monotonic() - start)
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the candidate may write junk to the channel: it only loses its own results
        if isinstance(event, dict) and isinstance(event.get("event"), str):
            result.events.append(event)
    if not result.events and proc.returncode not in (0, None) and _infrastructure_failure(result.stderr):
        raise SandboxError(f"the sandbox did not start: {result.stderr.strip()[:300]}")
    return result


def _infrastructure_failure(stderr: str) -> bool:
    return stderr.startswith(("bwrap:", "prlimit:", "setpriv:"))
