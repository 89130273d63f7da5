"""Per-completion bounds: run a verifier's costly step in a reusable worker process under CPU, wall-clock and
memory limits, so that no completion can stall a score run, an eval or a GRPO step.

Contract:
- ``run(fn, *args, limits=...)`` calls the module-level function ``fn(*args)`` (arguments and result picklable) in
  a worker process and returns its result. A worker is a plain ``python`` subprocess (not ``multiprocessing``: it
  also works inside daemonic Dask or Prefect workers) that serves one call at a time and is reused.
- Limits per call: ``cpu_s`` CPU seconds (RLIMIT_CPU's soft limit is set to the worker's CPU time so far plus
  ``cpu_s`` before each call, so the kernel kills a runaway worker with SIGXCPU even if it never returns to Python),
  ``wall_s`` seconds of waiting (then the parent SIGKILLs the worker), ``memory_bytes`` of address space
  (RLIMIT_AS; a MemoryError ends the worker). Crossing any of them raises ``BoundExceeded`` (the input's fault)
  and the worker is replaced; start-up and imports happen before the clock starts.
- Any other exception inside ``fn`` raises ``WorkerError`` with its type and message (the verifier's fault); the
  worker stays. A worker that dies otherwise also raises ``WorkerError`` and is replaced.
- Thread-safe: up to ``os.cpu_count()`` workers serve concurrent callers (``batch_rewards(workers=...)``); idle
  workers are kept; each exits when the parent does, even on SIGKILL (its request pipe closes; a call in progress
  ends at its CPU bound first). A forked child never shares its parent's workers.
- ``IN_WORKER`` is True inside a worker: code that bounds its own steps runs them inline there, since the whole
  call is already under a bound (no worker starts a worker).
"""

from __future__ import annotations

import atexit
import os
import pickle
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[1])
_START_TIMEOUT_S = 120.0  # interpreter start and imports on a loaded machine; not part of any call's bound
IN_WORKER = False  # set by serve(): see the module contract


@dataclass(frozen=True)
class Limits:
    cpu_s: int
    wall_s: float
    memory_bytes: int
    warm: tuple[str, ...] = ()  # modules the worker imports before it is ready (sympy takes ~1 s)


class BoundExceeded(Exception):
    """The call crossed a limit: ``kind`` is "cpu", "wall" or "memory"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class WorkerError(RuntimeError):
    """The called function raised, or the worker died for a reason that is no limit."""


class _Worker:
    def __init__(self, limits: Limits) -> None:
        code = f"import sys; sys.path.insert(0, {_ROOT!r}); from verifiers.bounds import serve; serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(limits.memory_bytes), *limits.warm],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.send = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        if not self.recv.poll(_START_TIMEOUT_S) or self.recv.recv() != "ready":
            self.kill()
            raise WorkerError(f"verifier worker did not start within {_START_TIMEOUT_S:.0f} s")

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits) -> Any:
        try:
            self.send.send((fn, args, limits.cpu_s))
            ready = self.recv.poll(limits.wall_s)
            reply = self.recv.recv() if ready else None
        except (EOFError, OSError):
            reply = None
            ready = True
        if not ready:
            self.kill()
            raise BoundExceeded("wall", f"exceeded the {limits.wall_s:g} s wall-clock bound")
        if reply is None:
            code = self.kill()
            if code == -signal.SIGXCPU:
                raise BoundExceeded("cpu", f"exceeded the {limits.cpu_s} s CPU bound")
            raise WorkerError(f"verifier worker died (exit {code})")
        status, value = reply
        if status == "ok":
            return value
        if status == "memory":
            self.kill()
            raise BoundExceeded("memory", f"exceeded the {limits.memory_bytes >> 20} MiB memory bound")
        raise WorkerError(value)

    def kill(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self.send.close()
        self.recv.close()
        return code

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class _Pool:
    def __init__(self) -> None:
        self._idle: dict[Limits, list[_Worker]] = {}
        self._lock = threading.Lock()

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits) -> Any:
        with self._lock:
            idle = self._idle.setdefault(limits, [])
            worker = idle.pop() if idle else None
        if worker is not None and not worker.alive:  # killed from outside while idle
            worker.kill()
            worker = None
        if worker is None:
            worker = _Worker(limits)
        try:
            result = worker.call(fn, args, limits)
        except BaseException:
            if worker.alive:
                self._release(worker, limits)
            raise
        self._release(worker, limits)
        return result

    def _release(self, worker: _Worker, limits: Limits) -> None:
        with self._lock:
            idle = self._idle.setdefault(limits, [])
            if len(idle) < (os.cpu_count() or 1):
                idle.append(worker)
                return
        worker.kill()


    def close(self, *, kill: bool = True) -> None:
        """Drop the idle workers: killed at exit; in a forked child only this process's copies of the pipes are
        closed, so the parent keeps its workers and the child starts its own."""
        with self._lock:
            workers = [w for idle in self._idle.values() for w in idle]
            self._idle.clear()
        for worker in workers:
            if kill:
                worker.kill()
            else:
                worker.send.close()
                worker.recv.close()


_POOL = _Pool()
atexit.register(_POOL.close)
os.register_at_fork(after_in_child=lambda: _POOL.close(kill=False))


def run(fn: Callable[..., Any], *args: Any, limits: Limits) -> Any:
    """``fn(*args)`` in a worker under ``limits``; raises BoundExceeded or WorkerError (see the module contract)."""
    return _POOL.run(fn, args, limits)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve() -> None:
    """The worker's loop: requests on stdin, replies on stdout (fd 1 then points at stderr, so stray prints from
    the called code cannot corrupt the channel)."""
    global IN_WORKER
    IN_WORKER = True
    memory_bytes, warm = int(sys.argv[1]), sys.argv[2:]
    recv = Connection(os.dup(0), writable=False)
    send = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for name in warm:
        __import__(name)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard), hard))
    send.send("ready")
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    while True:
        try:
            fn, args, cpu_s = recv.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        soft = int(_cpu_seconds()) + 1 + cpu_s
        resource.setrlimit(resource.RLIMIT_CPU, (soft if cpu_hard == resource.RLIM_INFINITY else min(soft, cpu_hard), cpu_hard))
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except MemoryError:
            send.send(("memory", ""))
            return
        except Exception as err:  # the function's own failure: reported to the caller as data
            reply = ("error", f"{type(err).__name__}: {err}")
        try:
            send.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            send.send(("error", f"result cannot be sent back: {err}"))
