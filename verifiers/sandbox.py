"""Run untrusted Python in a sandbox and return what it produced for given inputs.

- Each run is a separate process tree under bubblewrap, two levels deep: the outer bwrap makes the view (no
  network, read-only Python and system libraries only, a fresh size-limited tmpfs, an empty environment), the inner
  one runs as ``nobody`` in a user and PID namespace of its own.
- Limits, set by the harness on itself before the candidate's code is compiled: CPU seconds, address space (a
  budget per sandbox: ``memory_mb / nproc`` per process), file size, process count (per sandbox), open files, no
  core dumps; a wall-clock timeout on top, enforced here.
- The host is the trusted side of the nonce protocol with ``harness.py`` (``sandbox_protocol``: what is accepted,
  what is tampering; ``procs``: leftover processes from the host's /proc). When a run ends every process it
  started is gone and every fd it opened on the host is closed.
- ``run_code`` never raises for anything the candidate does; ``SandboxError`` only when the sandbox itself cannot
  start (then the verifier reports valid=False, never reward 0).
Why these choices (memory by address space, not cgroups): verifiers/README.md.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flywheel.verifiers.procs import candidate_processes, stop
from flywheel.verifiers.sandbox_protocol import Channel, RunResult, SandboxError, converse, limits_error

__all__ = ["Limits", "RunResult", "SandboxError", "bwrap_command", "rlimits", "run_code"]

HARNESS = (Path(__file__).with_name("harness.py")).read_text(encoding="utf-8")
NOBODY = 65534
MB = 1024 * 1024
MIN_PROCESS_MB = 48  # python -I -S with the harness and its 8 MB reserve peaks at 21 MB of address space (3.11)


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_s: int = Field(2, ge=1, le=600)
    wall_s: float = Field(10.0, gt=0, le=3600)
    memory_mb: int = Field(1024, ge=64)  # the whole sandbox's: each of its nproc processes gets memory_mb / nproc
    file_mb: int = Field(1, ge=1)
    nproc: int = Field(8, ge=1)
    tmpfs_mb: int = Field(16, ge=1)
    max_result_kb: int = Field(1024, ge=1)

    @model_validator(mode="after")
    def _python_fits(self) -> Limits:
        if self.process_mb < MIN_PROCESS_MB:
            raise ValueError(f"memory_mb / nproc = {self.process_mb} MB per process is below the {MIN_PROCESS_MB} MB "
                             "Python needs to start: raise memory_mb or lower nproc")
        return self

    @property
    def process_mb(self) -> int:
        """Address space per process: nproc of them together stay within the sandbox's memory_mb."""
        return self.memory_mb // self.nproc


SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/bin")


def _python() -> tuple[str, str]:
    """The interpreter and installation prefix the sandbox mounts (the project's base Python, not its venv)."""
    python = os.path.realpath(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable)
    return python, os.path.realpath(sys.base_prefix)


def bwrap_command(limits: Limits) -> list[str]:
    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    root = os.geteuid() == 0
    if not bwrap or (root and not setpriv):
        raise SandboxError("the code sandbox needs bubblewrap 0.8+ and util-linux's setpriv: run deploy/install.sh "
                           "(as root it installs Debian's bubblewrap) or `apt-get install bubblewrap util-linux`")
    python, prefix = _python()
    tmpfs = str(limits.tmpfs_mb * 1024 * 1024)
    outer = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
             "--ro-bind", "/usr", "/usr", "--ro-bind-try", "/lib", "/lib", "--ro-bind-try", "/lib64", "/lib64",
             "--ro-bind-try", "/bin", "/bin"]
    if not any(prefix == d or prefix.startswith(d + "/") for d in SYSTEM_DIRS):
        # bwrap creates the prefix's parents 0700 like their sources (/root): nobody must be able to pass them
        for parent in reversed(Path(prefix).parents[:-1]):
            outer += ["--perms", "0755", "--dir", str(parent)]
        outer += ["--ro-bind", prefix, prefix]
    outer += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp",
              "--perms", "0777", "--size", tmpfs, "--tmpfs", "/work", "--chdir", "/work", "--"]
    if root:
        outer += [str(setpriv), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    else:
        outer.insert(1, "--unshare-user")  # unprivileged: a user namespace makes the others possible
    inner = [bwrap, "--unshare-user", "--disable-userns", "--unshare-pid", "--dev-bind", "/", "/", "--die-with-parent",
             "--chdir", "/work", "--", python, "-I", "-S", "-c", HARNESS]
    return outer + inner


def rlimits(limits: Limits) -> dict[str, tuple[int, int]]:
    """What the harness sets on itself: soft = hard, except CPU (SIGXCPU at the soft limit, SIGKILL a second later).
    The process count is per user namespace, where the PID namespace's init counts too: one more than ``nproc``
    leaves the candidate ``nproc`` processes, its own included, as before. The address space is per process and
    inherited by forks: ``memory_mb / nproc`` each bounds the sandbox's total by ``memory_mb``."""
    space, fsize, nproc = limits.process_mb * MB, limits.file_mb * MB, limits.nproc + 1
    return {"cpu": (limits.cpu_s, limits.cpu_s + 1), "as": (space, space), "fsize": (fsize, fsize),
            "nproc": (nproc, nproc), "nofile": (64, 64), "core": (0, 0)}


RLIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE,
           "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}


def host_limits_allow(wanted: dict[str, tuple[int, int]]) -> None:
    """The harness cannot raise a hard limit it inherits; say so before starting bwrap, whose own forks a low nproc
    limit can already fail (then the error named bwrap, not the limit), rather than only from inside."""
    for name, (soft, hard) in wanted.items():
        here = resource.getrlimit(RLIMITS[name])[1]
        if here != resource.RLIM_INFINITY and hard > here:
            raise limits_error(f"{name} {soft}/{hard}: above this process's hard limit (hard limit here: {here})")


def run_code(code: str, entry_point: str, inputs: list[list[Any]], limits: Limits | None = None) -> RunResult:
    """Run ``entry_point(*args)`` for every ``args`` in ``inputs`` inside a fresh sandbox."""
    limits = limits or Limits()
    host_limits_allow(rlimits(limits))
    start = time.monotonic()
    proc = subprocess.Popen(bwrap_command(limits), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env={})
    channel = Channel(proc, start + limits.wall_s, limits.max_result_kb * 1024)
    result = RunResult()
    try:
        status = converse(channel, code, entry_point, inputs, rlimits(limits), result)
        if status == "finished":
            leftover = candidate_processes(proc.pid) - 1  # the harness itself waits to be killed
            if leftover > 0:
                result.events.append({"event": "leftover", "count": leftover})
            if channel.drain():
                result.tampering = "lines on the result channel after the final reply"
            result.events.append({"event": "done"})
        elif channel.eof:  # the sandbox ended on its own: its exit status says how
            try:
                result.exit_code = proc.wait(timeout=max(0.5, channel.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:
        channel.close()
        if proc.poll() is None:
            stop(proc)
        proc.wait()
        result.stderr = _leftover_stderr(proc)[:2000]
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
    result.timed_out, result.overflow = channel.timed_out, channel.overflow
    result.seconds = time.monotonic() - start
    if not result.started:  # the harness never ran, so the candidate's code never did
        why = result.stderr.strip()[:300] or "no hello from the harness within the wall-clock limit"
        raise SandboxError(f"the sandbox did not start: {why} (it needs bubblewrap 0.8+ for --disable-userns and user "
                           "namespaces for nobody: sysctl user.max_user_namespaces > 0)")
    return result


def _leftover_stderr(proc: subprocess.Popen[bytes]) -> str:
    """bwrap's and the harness's own error output (the candidate's goes to its file); every writer is gone."""
    assert proc.stderr
    os.set_blocking(proc.stderr.fileno(), False)
    try:
        return os.read(proc.stderr.fileno(), 4096).decode("utf-8", "replace")
    except BlockingIOError:
        return ""
