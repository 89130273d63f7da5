"""Hostile code against the sandbox's result channel and its neighbours: forged, duplicated and out-of-order results
(tampering, reward 0), a leftover process hidden from the candidate's own interpreter or behind a main thread that
ended alone, a fork bomb beside correct completions scored in the same batch, nested user namespaces, exceptions
and numbers shaped to crash the verifier (they must score 0, never valid=False), malformed error lines, and
forks that together would hold more memory than the sandbox's budget.

Each forging candidate finds the channel the way an attacker would (every writable pipe among its file
descriptors) and speaks whichever protocol it meets: the old one-event-per-test lines, or the nonce replies
(the nonce read from the harness's frame)."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from conftest import descendants, sandbox_processes
from flywheel.schemas import Task
from flywheel.verifiers.envs.code import code
from flywheel.verifiers.sandbox import Limits, run_code

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



# What the candidate raises or returns is data: none of it may turn its failure into valid=False (a skipped sample).
CHOSEN_ERRORS = {
    "errno a list, at call time": ("class E(Exception):\n    errno = [1]\ndef solve(xs):\n    raise E('x')\n",
                                   "0/4 passed; 4 raised, first: E: x"),
    "errno a list, at import time": ("class E(Exception):\n    errno = [1]\nraise E('x')\n", "E: x"),
    "errno too big for JSON": ("class E(Exception):\n    errno = 10 ** 5000\ndef solve(xs):\n    raise E('x')\n",
                               "0/4 passed; 4 raised, first: E: x"),
    "errno a property that raises": ("class E(Exception):\n    @property\n    def errno(self):\n"
                                     "        raise KeyError(1)\n"
                                     "def solve(xs):\n    raise E('x')\n", "0/4 passed; 4 raised, first: E: x"),
    "__str__ that raises": ("class E(Exception):\n    def __str__(self):\n        raise KeyError(1)\n"
                            "def solve(xs):\n    raise E('x')\n",
                            "0/4 passed; 4 raised, first: E: (the exception's message could not be read)"),
}


@pytest.mark.parametrize("name", sorted(CHOSEN_ERRORS))
def test_an_exception_the_candidate_shapes_is_its_runtime_error(name: str) -> None:
    source, details = CHOSEN_ERRORS[name]
    verdict = code.verify(task(), source)
    assert ((verdict.reward, verdict.failure_class, verdict.valid, verdict.details)
            == (0.0, "runtime_error", True, details))


def test_a_number_beyond_a_float_is_a_wrong_answer() -> None:
    verdict = code.verify(task(), "def solve(xs):\n    return [10 ** 400]\n")
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (0.0, "test_failure", True)
    assert verdict.details.startswith("0/4 passed; test 0 returned [1000000")
    assert code.code_reward(["def solve(xs):\n    return [10 ** 400]\n"], task=[task()]) == [0.0]


@pytest.mark.parametrize(("expected", "got", "equal"), [
    (10 ** 400, 10 ** 400, True), (10 ** 400, 10 ** 400 + 1, False), (10 ** 400, 1e308, False),
    (1.5, 10 ** 400, False), (10 ** 400, float("inf"), False), ([1, 10 ** 400], [1, 10 ** 400], True),
    (10 ** 12, 10 ** 12 + 1, False),  # an expected int is exact since code 1.3 (was within tolerance)
    (1e12, 10 ** 12 + 1, True),  # an expected float keeps the relative tolerance
], ids=["huge ints equal", "huge ints differ", "huge int vs float", "float vs huge int", "huge int vs inf",
        "nested huge ints", "expected int exact", "tolerance kept"])
def test_numbers_compare_without_raising(expected: object, got: object, equal: bool) -> None:
    assert code.same(expected, got) is equal


MALFORMED_ERROR_AT_CALL = CHANNELS + """
import os
def solve(xs):
    write_all([{'nonce': harness_local('nonce'), 'error': {'type': [], 'errno': None, 'message': 'x'}}])
    os._exit(0)  # the harness's own reply never comes: the forged line is the only one
"""

MALFORMED_ERROR_AT_LOAD = CHANNELS + """
import os
write_all([{'event': 'load_error', 'error': {'type': 'OSError', 'errno': [12], 'message': 'x'}}])
os._exit(0)
"""


@pytest.mark.parametrize(("source", "details"), [
    (MALFORMED_ERROR_AT_CALL, "test 0: an error that is not the harness's {type, errno, message}"),
    (MALFORMED_ERROR_AT_LOAD, "a load failure whose error is not the harness's {type, errno, message}"),
], ids=["at call time", "at load time"])
def test_an_error_line_of_another_shape_is_tampering(source: str, details: str) -> None:
    verdict = code.verify(task(), source)
    assert (verdict.reward, verdict.failure_class, verdict.valid, verdict.details) == (0.0, "tampering", True, details)
    assert sandbox_processes() == []


SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(os.uname().machine, 60)  # the thread's exit, not exit_group
ZOMBIE_LEADER = f"""
import ctypes, os, threading, time
STARTED = []
def solve(xs):
    if not STARTED:
        STARTED.append(1)
        if os.fork() == 0:
            threading.Thread(target=lambda: [time.sleep(1) for _ in iter(int, 1)]).start()
            ctypes.CDLL(None).syscall({SYS_EXIT}, 0)  # the main thread ends alone: the process reads Z, lives on
        time.sleep(0.3)
    return [x for x in xs if x % 3 == 0]
"""


def test_a_process_whose_main_thread_ended_still_counts_as_left_over() -> None:
    verdict = code.verify(task(), ZOMBIE_LEADER)
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (0.0, "resource_limit", True)
    assert verdict.details == "left 1 process(es) running after the tests"
    assert sandbox_processes() == []


FORKS_FILLING_MEMORY = """
import os, time
def solve(xs):
    children = []
    for _ in range(7):
        pid = os.fork()
        if pid == 0:
            try:
                block = b'x' * (100 << 20)  # written, so resident
            except MemoryError:
                os._exit(1)
            time.sleep(1)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    block = b'x' * (100 << 20)
    return [x for x in xs if x % 3 == 0]
"""


def test_memory_is_bounded_per_sandbox_not_per_process(monkeypatch) -> None:
    """8 processes of 100 MB each under a 512 MB sandbox: every process gets 64 MB, so the sandbox never holds
    much more than its budget (before, each process had the whole 512 MB: 800 MB resident, and reward 1.0)."""
    monkeypatch.setattr(code, "LIMITS", Limits(cpu_s=2, wall_s=10, memory_mb=512, nproc=8))
    peak, done = [0], threading.Event()
    before = set(descendants(os.getpid()))  # earlier tests' verifier workers and servers are not the sandbox's

    def watch() -> None:
        while not done.is_set():
            ours = set(descendants(os.getpid())) - before
            peak[0] = max(peak[0], sum(resident_kb(pid) for pid in ours if not unexeced_fork(pid)))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        verdict = code.verify(task(), FORKS_FILLING_MEMORY)
    finally:
        done.set()
        watcher.join()
    assert (verdict.reward, verdict.failure_class, verdict.valid, verdict.details) == (
        0.0, "resource_limit", True, "MemoryError: ")
    assert 0 < peak[0] < 512 * 1024, f"the sandbox's processes held {peak[0] // 1024} MB"
    assert sandbox_processes() == []


def unexeced_fork(pid: int) -> bool:
    """A child of this process between its fork and its exec (Popen starting bwrap) still shows this process's
    memory as its own: with a model loaded earlier in the same worker, 2 GB that are not the sandbox's."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() == Path("/proc/self/cmdline").read_bytes()
    except OSError:
        return True  # gone already: nothing resident


def resident_kb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
