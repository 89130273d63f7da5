"""Run untrusted Python in a sandbox and return what it produced for given inputs.

Contract:
- Each run is a separate process tree under bubblewrap (``bwrap``), two levels deep. The outer bwrap (as root
  when the host is root, so it can mount a Python installed under /root) makes the view: new PID, network,
  IPC and UTS namespaces (no network at all), a read-only view of the Python installation and system
  libraries only (no project files, no datasets, no home), a fresh size-limited tmpfs as working directory and
  /tmp, an empty environment. The inner bwrap runs as the uid ``nobody`` (when the host is root) with a user
  namespace of its own and ``--disable-userns`` (the candidate cannot create user namespaces) and a PID
  namespace of its own (the candidate's parent is that namespace's init, which it cannot kill).
- Limits, set by the harness on itself before the candidate's code is compiled: CPU seconds, address space,
  file size, process count, open files, no core dumps; a wall-clock timeout on top, enforced here. The process
  count is per user namespace, so per sandbox: a fork bomb cannot starve the sandboxes beside it. Memory is a
  budget per sandbox: every process gets ``memory_mb / nproc`` of address space, so all of a sandbox's processes
  together map at most ``memory_mb`` (plus the two tmpfs). The address space is per process and inherited by
  every fork and exec, so it holds on any host; a memory cgroup would allow one big process instead of equal
  shares, but the containers this runs in (CI's too) have cgroup v1 with the memory controller owned by the
  runner and no cgroup v2 memory controller, and a limit that applies everywhere beats one that may not.
- The host is the trusted side of the protocol (``verifiers/harness.py``): it sends one test at a time with
  a fresh random nonce after the program loaded and accepts exactly one reply per request carrying that nonce.
  A line that is not that reply (unsolicited, duplicated, out of order, malformed) is ``tampering``. Every line
  is untrusted data, whoever wrote it: an error must be exactly ``{"type": str, "errno": int | None,
  "message": str}`` (``Failure``), or the line is tampering; a value is any JSON, compared by the verifier with
  functions that never raise. Output on the channel is capped; the candidate's stdout is a capped file.
- Leftover processes are counted here, from /proc, after the last reply (never by the candidate's
  interpreter, which the candidate can patch). A process counts while any of its threads is alive: a main
  thread that ended alone (``SYS_exit``) shows the process as a zombie although its other threads run on.
  When the run ends every process it started is gone: the host kills the outer PID namespace's init.
- ``run_code`` never raises for anything the candidate does; it raises ``SandboxError`` only when the sandbox
  itself cannot start, i.e. the harness never said hello (then the verifier reports valid=False, never reward 0).
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

HARNESS = (Path(__file__).with_name("harness.py")).read_text(encoding="utf-8")
NOBODY = 65534
MB = 1024 * 1024
MIN_PROCESS_MB = 48  # python -I -S with the harness and its 8 MB reserve peaks at 21 MB of address space (3.11)


class SandboxError(RuntimeError):
    """The sandbox could not run (missing bwrap, namespaces refused): an infrastructure failure."""


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


class Failure(BaseModel):
    """An exception as the harness describes it. Strict: the candidate chooses an exception's errno and can write
    lines of its own, so anything else (a list for errno, a missing field) is a line the harness did not write."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type: str
    errno: int | None
    message: str


@dataclass
class RunResult:
    events: list[dict[str, Any]] = field(default_factory=list)  # accepted replies, as the verifier reads them
    exit_code: int | None = None  # the sandbox's exit status when it ended on its own (128+N: killed by signal N)
    timed_out: bool = False
    overflow: bool = False
    tampering: str | None = None  # why the channel's lines cannot be trusted; the run then scores 0
    started: bool = False  # the harness said hello: from then on, anything that goes wrong is the candidate's
    stderr: str = ""
    seconds: float = 0.0


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
    return {"cpu": (limits.cpu_s, limits.cpu_s + 1), "as": (limits.process_mb * MB,) * 2,
            "fsize": (limits.file_mb * MB,) * 2, "nproc": (limits.nproc + 1,) * 2, "nofile": (64, 64), "core": (0, 0)}


class _Channel:
    """The host's end of the harness's pipes: queued writes and whole lines read back, under one deadline and a
    byte cap. ``line()`` returns None at end of file, timeout or overflow; the flags say which."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: float, cap: int) -> None:
        assert proc.stdin and proc.stdout
        self.stdin, self.stdout, self.deadline, self.cap = proc.stdin, proc.stdout, deadline, cap
        os.set_blocking(self.stdin.fileno(), False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.stdout, selectors.EVENT_READ)
        self.pending = bytearray()
        self.partial = bytearray()
        self.lines: deque[bytes] = deque()
        self.received = 0
        self.eof = self.timed_out = self.overflow = False

    def send(self, message: dict[str, Any]) -> None:
        if not self.pending and not self.stdin.closed:
            self.selector.register(self.stdin, selectors.EVENT_WRITE)
        self.pending += json.dumps(message).encode() + b"\n"

    def line(self) -> bytes | None:
        while not self.lines:
            if self.eof or self.overflow:
                return None
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                return None
            for key, _ in self.selector.select(timeout=left):
                if key.fileobj is self.stdin:
                    self._write()
                else:
                    self._read()
        return self.lines.popleft()

    def drain(self) -> bool:
        """Read what the sandbox has written and nobody asked for yet; True when there is any."""
        os.set_blocking(self.stdout.fileno(), False)
        try:
            self._read()
        except BlockingIOError:
            pass
        return bool(self.lines or self.partial)

    def _write(self) -> None:
        try:
            del self.pending[:os.write(self.stdin.fileno(), self.pending)]
        except BrokenPipeError:
            self.pending.clear()  # the harness is gone: its end of file says so
        if not self.pending:
            self.selector.unregister(self.stdin)

    def _read(self) -> None:
        data = os.read(self.stdout.fileno(), 65536)
        if not data:
            self.eof = True
            return
        self.received += len(data)
        if self.received > self.cap:
            self.overflow = True
            return
        *whole, rest = (bytes(self.partial) + data).split(b"\n")
        self.lines.extend(whole)
        self.partial = bytearray(rest)


def _parse(line: bytes | None) -> dict[str, Any] | None:
    if line is None:
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # junk, or nesting deep enough to exhaust the host's stack
        return {}
    return message if isinstance(message, dict) else {}


def _converse(channel: _Channel, code: str, entry_point: str, inputs: list[list[Any]], limits: Limits,
              result: RunResult) -> str:
    """Drive the harness's protocol, filling ``result``: "finished" when every request was answered, "failed to
    load" after a syntax or load error, "stopped" when the sandbox stopped answering (end of file, timeout,
    overflow) or tampered."""
    channel.send({"code": code, "entry_point": entry_point, "limits": rlimits(limits)})
    hello = _parse(channel.line())
    if hello is None:
        return "stopped"
    result.started = True
    if hello != {"event": "hello"}:
        result.tampering = "the sandbox's first line was not the harness's hello"
        return "stopped"
    loaded = _parse(channel.line())
    if loaded is None:
        return "stopped"
    if loaded.get("event") in ("syntax_error", "load_error") and loaded.keys() == {"event", "error"}:
        error = _failure(loaded["error"])
        if error is None:
            result.tampering = "a load failure whose error is not the harness's {type, errno, message}"
            return "stopped"
        result.events.append({"event": loaded["event"], "error": error})
        return "failed to load"
    if loaded != {"event": "ready"}:
        result.tampering = "a line on the result channel before the program had loaded"
        return "stopped"
    for i, args in enumerate(inputs):
        nonce = secrets.token_hex(16)
        channel.send({"nonce": nonce, "args": args})
        reply = _parse(channel.line())
        if reply is None:
            return "stopped"
        if not _answers(reply, nonce):
            result.tampering = f"test {i}: a line that is not the one reply to its request (forged, duplicated or out of order)"
            return "stopped"
        if "value" in reply:
            result.events.append({"event": "test", "i": i, "value": reply["value"]})
            continue
        error = _failure(reply["error"])
        if error is None:
            result.tampering = f"test {i}: an error that is not the harness's {{type, errno, message}}"
            return "stopped"
        result.events.append({"event": "test", "i": i, "error": error})
        if error["type"] == "MemoryError":
            break  # the process's memory is spent: the remaining tests count as failed
    nonce = secrets.token_hex(16)
    channel.send({"nonce": nonce, "finish": True})
    finished = _parse(channel.line())
    if finished is None:
        return "stopped"
    if finished != {"nonce": nonce, "event": "finished"}:
        result.tampering = "a line that is not the one reply to the final request (forged, duplicated or out of order)"
        return "stopped"
    return "finished"


def _answers(reply: dict[str, Any], nonce: str) -> bool:
    return reply.get("nonce") == nonce and len(reply) == 2 and ("value" in reply or "error" in reply)


def _failure(error: Any) -> dict[str, Any] | None:
    """The error as a plain dict of the exact shape ``Failure``; None when it has any other shape."""
    try:
        return Failure.model_validate(error).model_dump()
    except ValidationError:
        return None


def _nspid(pid: int) -> list[str]:
    """The process's PIDs from the host's namespace down to its own, from /proc; [] once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return []
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return fields.get("NSpid", "").split()


def _descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                children = [int(c) for c in Path(f"/proc/{parent}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
            found += children
            stack += children
    return found


def _alive(pid: int) -> bool:
    """Whether any thread of the process still runs. The process's own State is its main thread's: a main thread
    that ended alone (SYS_exit, not exit_group) reads Z while the other threads go on."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in threads:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # the name before ")" is the candidate's choice, spaces included
        if fields and fields[0] not in ("Z", "X"):
            return True
    return False


def candidate_processes(bwrap_pid: int) -> int:
    """Live processes of the candidate (its PID namespace, two below ours, less that namespace's init), counted
    from the host's /proc: the candidate's interpreter has no say."""
    depth = len(_nspid(os.getpid())) + 2
    count = 0
    for pid in _descendants(bwrap_pid):
        nspid = _nspid(pid)
        if len(nspid) >= depth and not (len(nspid) == depth and nspid[-1] == "1") and _alive(pid):
            count += 1
    return count


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the sandbox from the inside out: the outer PID namespace's init (the namespace dies with it), then
    bwrap reaps it. Killing bwrap first would orphan that process as a zombie of the host's init."""
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
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_code(code: str, entry_point: str, inputs: list[list[Any]], limits: Limits | None = None) -> RunResult:
    """Run ``entry_point(*args)`` for every ``args`` in ``inputs`` inside a fresh sandbox."""
    limits = limits or Limits()
    start = time.monotonic()
    proc = subprocess.Popen(bwrap_command(limits), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env={})
    channel = _Channel(proc, start + limits.wall_s, limits.max_result_kb * 1024)
    result = RunResult()
    try:
        status = _converse(channel, code, entry_point, inputs, limits, result)
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
        if proc.poll() is None:
            _stop(proc)
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
