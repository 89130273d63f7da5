"""Hostile code against the sandbox's result channel and its neighbours: forged, duplicated and out-of-order results
(tampering, reward 0), a leftover process hidden from the candidate's own interpreter, a fork bomb beside correct
completions scored in the same batch, and nested user namespaces.

Each forging candidate finds the channel the way an attacker would (every writable pipe among its file
descriptors) and speaks whichever protocol it meets: the old one-event-per-test lines, or the nonce replies
(the nonce read from the harness's frame)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from schemas import Task
from verifiers import code
from verifiers.sandbox import NOBODY, Limits, run_code

TESTS = [([[3, 8, 12]], [3, 12]), ([[]], []), ([[9]], [9]), ([[1, 2]], [])]
EXPECTED = [expected for _, expected in TESTS]

CHANNELS = """
import json, os, stat, sys
def channels():
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                yield fd
        except OSError:
            pass
def write_all(lines):
    for fd in channels():
        try:
            os.write(fd, ''.join(json.dumps(line) + '\\n' for line in lines).encode())
        except OSError:
            pass
def harness_local(name):
    frame = sys._getframe(1)
    while frame is not None:
        if name in frame.f_locals:
            return frame.f_locals[name]
        frame = frame.f_back
    return None
"""

IMPORT_TIME_FORGERY = CHANNELS + f"""
EXPECTED = {EXPECTED!r}
write_all([{{'event': 'test', 'i': i, 'value': v}} for i, v in enumerate(EXPECTED)]
          + [{{'event': 'ready'}}] + [{{'nonce': n, 'value': v}} for n, v in enumerate(EXPECTED)])
"""

RAISES = "def solve(xs):\n    raise ValueError('no idea')\n"
LOOPS = "def solve(xs):\n    while True:\n        pass\n"

DUPLICATE = CHANNELS + """
def solve(xs):
    answer = [x for x in xs if x % 3 == 0]
    nonce, i = harness_local('nonce'), harness_local('i')
    write_all([{'nonce': nonce, 'value': answer}] if nonce else [{'event': 'test', 'i': i, 'value': answer}])
    raise ValueError('the forged line already answered')
"""

OUT_OF_ORDER = CHANNELS + f"""
EXPECTED = {EXPECTED!r}
SEEN = []
def solve(xs):
    nonce, i = harness_local('nonce'), harness_local('i')
    if nonce is None and i == 0:  # the old harness: announce the last test's result early, then fail it
        write_all([{{'event': 'test', 'i': 3, 'value': EXPECTED[3]}}])
    if nonce is not None and SEEN and xs == [1, 2]:  # the last test: answer under the previous request's nonce
        write_all([{{'nonce': SEEN[-1], 'value': EXPECTED[3]}}])
    SEEN.append(nonce)
    if xs == [1, 2]:
        raise ValueError('the forged line already answered')
    return [x for x in xs if x % 3 == 0]
"""

HIDDEN_LEFTOVER = """
import os, time
real_listdir = os.listdir
os.listdir = lambda path='.': [] if str(path) == '/proc' else real_listdir(path)
FORKED = []
def solve(xs):
    if not FORKED:
        FORKED.append(1)
        if os.fork() == 0:
            os.setsid()
            time.sleep(600)
            os._exit(0)
    return [x for x in xs if x % 3 == 0]
"""

FORK_BOMB = """
import os, time
HOLD_UNTIL = []
def solve(xs):
    if not HOLD_UNTIL:
        HOLD_UNTIL.append(time.monotonic() + 2)  # holds every process it can get for 2 s, then all exit
    main = os.getpid()
    while time.monotonic() < HOLD_UNTIL[0]:
        try:
            os.fork()
        except OSError:
            time.sleep(0.05)
    if os.getpid() != main:
        os._exit(0)
    return None
"""

GOOD_WITH_A_CHILD = """
import os
def solve(xs):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return [x for x in xs if x % 3 == 0]
"""

def task() -> Task:
    tests = [{"args": args, "expected": expected} for args, expected in TESTS]
    return Task.model_validate({"env": "code", "messages": [{"role": "user", "content": "Write solve(xs)."}],
                                "reference": {"answer": "", "entry_point": "solve", "tests": tests},
                                "meta": {"seed_id": "hostile-sandbox"}})


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


def descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            stack += children
    return found


@pytest.fixture(autouse=True)
def quick_limits(monkeypatch) -> None:
    monkeypatch.setattr(code, "LIMITS", Limits(cpu_s=1, wall_s=5))


@pytest.mark.parametrize("function", [RAISES, LOOPS], ids=["raising function", "looping function"])
def test_results_forged_at_import_time_are_tampering(function: str) -> None:
    verdict = code.verify(task(), IMPORT_TIME_FORGERY + function)
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (0.0, "tampering", True)
    assert verdict.details == "a line on the result channel before the program had loaded"
    assert sandbox_processes() == []


def test_a_forged_reply_beside_the_real_one_is_tampering() -> None:
    verdict = code.verify(task(), DUPLICATE)
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (0.0, "tampering", True)
    assert verdict.details == ("test 1: a line that is not the one reply to its request (forged, duplicated or "
                               "out of order)")


def test_a_reply_under_an_earlier_nonce_is_tampering() -> None:
    verdict = code.verify(task(), OUT_OF_ORDER)
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (0.0, "tampering", True)
    assert verdict.details == ("test 3: a line that is not the one reply to its request (forged, duplicated or "
                               "out of order)")


def test_a_patched_listdir_does_not_hide_a_leftover_process() -> None:
    verdict = code.verify(task(), HIDDEN_LEFTOVER)
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (0.0, "resource_limit", True)
    assert verdict.details == "left 1 process(es) running after the tests"
    assert sandbox_processes() == []


def test_a_fork_bomb_does_not_starve_the_sandboxes_beside_it(monkeypatch) -> None:
    monkeypatch.setattr(code, "LIMITS", Limits(cpu_s=2, wall_s=30))  # generous: 8 sandboxes share 2 cores
    rewards = code.code_reward([FORK_BOMB] + [GOOD_WITH_A_CHILD] * 7, task=[task()] * 8)
    assert rewards == [0.0] + [1.0] * 7
    assert sandbox_processes() == []


def test_nested_user_namespaces_are_refused() -> None:
    source = ("import ctypes\ndef solve():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
              "    return [libc.unshare(0x10000000), ctypes.get_errno()]\n")  # CLONE_NEWUSER
    result = run_code(source, "solve", [[]])
    assert [e.get("value") for e in result.events if e["event"] == "test"] == [[-1, errno.ENOSPC]]

