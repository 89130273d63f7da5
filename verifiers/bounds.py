"""Per-completion bounds: run a verifier's costly step in a reusable worker process under CPU, wall-clock and
memory limits, so that no completion can stall a score run, an eval or a GRPO step.

- ``run(fn, *args, limits=...)`` calls the module-level function ``fn(*args)`` (picklable) in a worker process (a
  plain ``python`` subprocess, reused) and returns its result.
- Crossing ``cpu_s`` (RLIMIT_CPU), ``wall_s`` (the parent SIGKILLs the worker) or ``memory_bytes`` (RLIMIT_AS)
  raises ``BoundExceeded`` (the input's fault) and replaces the worker; any other exception in ``fn``, or a worker
  that dies, raises ``WorkerError`` (the verifier's fault).
- A worker is reused only after a call that completed; every reply carries its request's number.
- Thread-safe: at most ``os.cpu_count()`` workers alive; callers beyond wait, or, given ``wait_s``, get ``Busy``.
- ``IN_WORKER`` is True inside a worker (no worker starts a worker).
The full contract: verifiers/README.md.
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

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


class Busy(RuntimeError):
    """No worker freed up within the caller's ``wait_s``: nothing was called; retry later."""


class _Worker:
    def __init__(self, limits: Limits) -> None:
        code = "from flywheel.verifiers.bounds import serve; serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(limits.memory_bytes), *limits.warm],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.send = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.calls = 0
        started = True  # it answered, or its pipe broke: not a time-out
        try:
            started = self.recv.poll(_START_TIMEOUT_S)
            if started and self.recv.recv() == "ready":
                return
        except (EOFError, OSError):  # it died during its imports (its pipe closed first): reap it, then say how
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        code = self.kill()
        raise WorkerError(f"verifier worker did not start within {_START_TIMEOUT_S:.0f} s" if not started else
                          f"verifier worker exited during start-up (exit {code}): check Limits.warm {limits.warm}")

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits) -> tuple[str, Any]:
        """One request and its reply: ("ok", result) or ("error", message), the worker then idle again. Raises
        BoundExceeded or WorkerError with the worker killed. Every reply carries its request's number: a reply
        to another request (which the caller's clean-up should make impossible) kills the worker."""
        self.calls += 1
        try:
            self.send.send((self.calls, fn, args, limits.cpu_s))
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
        number, status, value = reply
        if number != self.calls:
            self.kill()
            raise WorkerError(f"verifier worker answered request {number} to request {self.calls}")
        if status == "memory":
            self.kill()
            raise BoundExceeded("memory", f"exceeded the {limits.memory_bytes >> 20} MiB memory bound")
        return status, value

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
    """At most ``size`` workers alive at once (idle, busy or starting, all limits together); a caller that finds
    none idle for its limits and no room to start one evicts an idle worker of other limits, or waits."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._reset()

    def _reset(self) -> None:
        self._idle: dict[Limits, list[_Worker]] = {}
        self._alive = 0  # workers that exist or are being started
        self._cond = threading.Condition()

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits, wait_s: float | None = None) -> Any:
        worker, done = None, False
        try:
            worker = self._take(limits, wait_s)
            status, value = worker.call(fn, args, limits)
            done = True  # the reply was read: the worker is idle again
        finally:
            # Any other way out (a bound, a dead worker, KeyboardInterrupt or a thread's cancellation while the
            # request was in flight) leaves the worker's state unknown, its reply perhaps still in the pipe for
            # the next caller to read: such a worker is killed, never reused.
            if worker is not None:
                self._give_back(worker, limits, reuse=done)
        if status == "error":
            raise WorkerError(value)
        return value

    def _take(self, limits: Limits, wait_s: float | None = None) -> _Worker:
        """An idle worker for ``limits``, or a new one once there is room; the wait is no part of any bound. Raises
        Busy when ``wait_s`` (None: no limit) passes first."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        with self._cond:
            while True:
                idle = self._idle.get(limits)
                if idle:
                    worker = idle.pop()
                    if worker.alive:
                        return worker
                    victim: _Worker | None = worker  # killed from outside while idle: its slot is reused
                    break
                if self._alive < self.size:
                    self._alive += 1
                    victim = None
                    break
                victim = next((idle.pop() for idle in self._idle.values() if idle), None)
                if victim is not None:  # an idle worker of other limits makes room
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._cond.notify()  # a wake-up this waiter may have taken as it timed out goes to the next
                    raise Busy(f"no verifier worker freed up within {wait_s:g} s (all {self.size} busy)")
                self._cond.wait(left)
        try:
            if victim is not None:
                victim.kill()
            return _Worker(limits)
        except BaseException:
            with self._cond:
                self._alive -= 1
                self._cond.notify()
            raise

    def _give_back(self, worker: _Worker, limits: Limits, *, reuse: bool) -> None:
        if reuse and worker.alive:
            with self._cond:
                self._idle.setdefault(limits, []).append(worker)
                self._cond.notify()
            return
        worker.kill()
        with self._cond:
            self._alive -= 1
            self._cond.notify()

    def close(self) -> None:
        """Kill the idle workers (at exit)."""
        with self._cond:
            workers = [w for idle in self._idle.values() for w in idle]
            self._idle.clear()
            self._alive -= len(workers)
        for worker in workers:
            worker.kill()

    def forget(self) -> None:
        """In a forked child: close only this process's copies of the idle workers' pipes (the parent keeps its
        workers) and start afresh, with a new lock (another thread may have held the old one at the fork)."""
        for worker in [w for idle in self._idle.values() for w in idle]:
            worker.send.close()
            worker.recv.close()
        self._reset()


_POOL = _Pool(os.cpu_count() or 1)
atexit.register(_POOL.close)
os.register_at_fork(after_in_child=_POOL.forget)


def run(fn: Callable[..., Any], *args: Any, limits: Limits, wait_s: float | None = None) -> Any:
    """``fn(*args)`` in a worker under ``limits``; raises BoundExceeded or WorkerError, or Busy when ``wait_s`` is
    given and no worker freed up within it (see the module contract)."""
    return _POOL.run(fn, args, limits, wait_s)


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
    resource.setrlimit(resource.RLIMIT_AS,
                       (memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard), hard))
    send.send("ready")
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    while True:
        try:
            number, fn, args, cpu_s = recv.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        soft = int(_cpu_seconds()) + 1 + cpu_s
        resource.setrlimit(resource.RLIMIT_CPU,
                           (soft if cpu_hard == resource.RLIM_INFINITY else min(soft, cpu_hard), cpu_hard))
        try:
            reply: tuple[int, str, Any] = (number, "ok", fn(*args))
        except MemoryError:
            send.send((number, "memory", ""))
            return
        except Exception as err:  # the function's own failure: reported to the caller as data
            reply = (number, "error", f"{type(err).__name__}: {err}")
        try:
            send.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            send.send((number, "error", f"result cannot be sent back: {err}"))
