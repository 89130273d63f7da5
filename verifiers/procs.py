"""Process bookkeeping for the code sandbox, read from the host's /proc (never from the candidate's interpreter,
which the candidate can patch).

Contract:
- ``descendants(pid)``: every process below ``pid`` (children of any of its threads, recursively); processes
  that end while being walked are skipped, never an error.
- ``candidate_processes(bwrap_pid)``: the candidate's live processes, i.e. those of the PID namespace two levels
  below ours, less that namespace's init. A process counts while any of its threads is alive: a main thread
  that ended alone (``SYS_exit``) shows the process as a zombie although its other threads run on.
- ``stop(proc)``: ends a sandbox and everything in it (it kills the outer PID namespace's init, so the whole
  namespace dies), then reaps bwrap; it never raises for a process already gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def _nspid(pid: int) -> list[str]:
    """The process's PIDs from the host's namespace down to its own, from /proc; [] once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return []
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return fields.get("NSpid", "").split()


def descendants(pid: int) -> list[int]:
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
    for pid in descendants(bwrap_pid):
        nspid = _nspid(pid)
        if len(nspid) >= depth and not (len(nspid) == depth and nspid[-1] == "1") and _alive(pid):
            count += 1
    return count


def stop(proc: subprocess.Popen[bytes]) -> None:
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
