"""Hostile code against the sandbox: every case is contained, scored as a failure of the right class, and the
host is unaffected (no files written, no connection made, no process left, the test process alive)."""

from __future__ import annotations

import gc
import os
import resource
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from conftest import sandbox_processes
from flywheel.schemas import Task, Verdict
from flywheel.verifiers.envs.code import code
from flywheel.verifiers.sandbox import Limits, run_code

HOSTILE = {
    "fork bomb": ("import os\ndef solve(xs):\n    while True:\n        os.fork()\n", "resource_limit"),
    "fork bomb that swallows errors": ("import os\ndef solve(xs):\n    while True:\n        try:\n"
                                       "            os.fork()\n"
                                       "        except OSError:\n            pass\n", "timeout"),
    "memory bomb": ("def solve(xs):\n    blocks = []\n    while True:\n"
                    "        blocks.append(bytearray(64 * 1024 * 1024))\n",
                    "resource_limit"),
    "infinite loop": ("def solve(xs):\n    while True:\n        pass\n", "timeout"),
    "sleeps past the wall clock": ("import time\ndef solve(xs):\n    time.sleep(3600)\n", "timeout"),
    "endless output": ("def solve(xs):\n    while True:\n        print('spam' * 1000)\n", "resource_limit"),
    "floods the result channel": ("import os\ndef solve(xs):\n    while True:\n        os.write(3, b'x' * 65536)\n",
                                  "resource_limit"),
    "exits early to fake success": ("import os\nprint('ALL TESTS PASSED')\nos._exit(0)\n", "runtime_error"),
    "leaves a background process": ("import os, time\ndef solve(xs):\n    if os.fork() == 0:\n        os.setsid()\n"
                                    "        time.sleep(3600)\n    return [x for x in xs if x % 3 == 0]\n",
                                    "resource_limit"),
    "kills its parent and everything it can": ("import os, signal\ndef solve(xs):\n"
                                               "    os.kill(os.getppid(), signal.SIGKILL)\n"
                                               "    os.kill(-1, signal.SIGKILL)\n"
                                               "    os.kill(HOST_PID, signal.SIGKILL)\n"
                                               "    return [x for x in xs if x % 3 == 0]\n", "runtime_error"),
}


def divisible_task() -> Task:
    tests = [{"args": [[3, 8, 12]], "expected": [3, 12]}, {"args": [[]], "expected": []}]
    return Task.model_validate({"env": "code", "messages": [{"role": "user", "content": "Write solve(xs)."}],
                                "reference": {"answer": "", "entry_point": "solve", "tests": tests},
                                "meta": {"seed_id": "hostile"}})





@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_contained(name: str, monkeypatch) -> None:
    source, expected_class = HOSTILE[name]
    monkeypatch.setattr(code, "LIMITS", Limits(cpu_s=1, wall_s=3))
    verdict = code.verify(divisible_task(), source.replace("HOST_PID", str(os.getpid())))
    assert verdict.valid, verdict.details
    assert verdict.failure_class == expected_class, verdict.details
    assert verdict.reward == 0.0, verdict.details
    assert sandbox_processes() == []


def test_files_outside_the_work_directory_are_untouchable(tmp_path) -> None:
    host_file = Path("/tmp") / f"flywheel-escape-{uuid.uuid4().hex}"
    repo_file = Path(__file__).resolve().parents[2] / f"escape-{uuid.uuid4().hex}"
    source = (f"def solve():\n    written = []\n    for path in ({str(host_file)!r}, {str(repo_file)!r}, "
              f"'/etc/flywheel', '/usr/lib/flywheel'):\n        try:\n            open(path, 'w').write('x')\n"
              f"            written.append(path)\n"
              f"        except OSError:\n            pass\n    open('local.txt', 'w').write('fine')\n"
              f"    return written\n")
    result = run_code(source, "solve", [[]])
    assert [e.get("value") for e in result.events if e["event"] == "test"] == [[str(host_file)]]  # its own /tmp only
    assert not host_file.exists() and not repo_file.exists()


def test_no_network_even_to_the_host_loopback() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(5)
    port = server.getsockname()[1]
    accepted: list[object] = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)))
    thread.start()
    source = (f"import socket\ndef solve(xs):\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
              "    return 'connected'\n")
    verdict = code.verify(divisible_task(), source)
    thread.join()
    server.close()
    assert verdict.failure_class == "runtime_error" and "Error" in verdict.details
    assert accepted == [None], "the sandbox reached a server on the host"


def _accept(server: socket.socket) -> object:
    try:
        return server.accept()
    except TimeoutError:
        return None


def test_environment_is_empty_and_the_user_unprivileged() -> None:
    source = ("import os\ndef solve():\n"
              "    return [dict(os.environ), os.getcwd(), os.getuid() != 0, sorted(os.listdir('/'))]\n")
    result = run_code(source, "solve", [[]])
    env, cwd, unprivileged, root_entries = next(e["value"] for e in result.events if e["event"] == "test")
    assert set(env) <= {"PATH", "PWD", "LC_CTYPE"} and cwd == "/work" and unprivileged
    assert "home" not in root_entries and "etc" not in root_entries


def test_trl_reward_runs_a_batch_in_parallel_in_order() -> None:
    task = divisible_task()
    good = "def solve(xs):\n    return [x for x in xs if x % 3 == 0]\n"
    rewards = code.code_reward([good, "def solve(xs):\n    return []\n", "syntax error(", good], task=[task] * 4)
    assert rewards == [1.0, 0.5, 0.0, 1.0]


def test_flooding_the_real_channel_is_a_resource_limit(monkeypatch) -> None:
    """The channel is no longer fd 3 (that is the candidate's output file now): flooding the real one still caps."""
    source = ("import os, stat\ndef solve(xs):\n    while True:\n        for fd in range(3, 64):\n            try:\n"
              "                if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
              "                    os.write(fd, b'x' * 65536)\n"
              "            except OSError:\n                pass\n")
    monkeypatch.setattr(code, "LIMITS", Limits(cpu_s=1, wall_s=3))
    verdict = code.verify(divisible_task(), source)
    assert ((verdict.reward, verdict.failure_class, verdict.details)
            == (0.0, "resource_limit", "flooded the result channel"))
    assert sandbox_processes() == []


def test_a_candidate_cannot_pass_for_a_sandbox_that_failed_to_start() -> None:
    """bwrap's own processes share the candidate's uid: writing bwrap-like errors to their stderr and exiting must
    still be the candidate's runtime_error (reward 0), never valid=False (which would drop the sample)."""
    source = ("import os\nfor pid in filter(str.isdigit, os.listdir('/proc')):\n    try:\n"
              "        fd = os.open(f'/proc/{pid}/fd/2', os.O_WRONLY)\n"
              "        os.write(fd, b'bwrap: cannot start\\n')\n"
              "    except OSError:\n        pass\nos._exit(1)\n")
    verdict = code.verify(divisible_task(), source)
    assert (verdict.reward, verdict.valid, verdict.failure_class) == (0.0, True, "runtime_error")
    assert verdict.details == "the program exited before the tests finished (exit status 1)"


def test_the_memory_budget_is_the_sandboxs_and_each_process_must_fit_python() -> None:
    assert Limits().process_mb == 128 and Limits(memory_mb=512, nproc=4).process_mb == 128
    with pytest.raises(ValidationError, match="memory_mb / nproc = 16 MB per process is below the 48 MB"):
        Limits(memory_mb=128, nproc=8)


def test_the_default_budget_leaves_one_process_room_for_real_work() -> None:
    """128 MB of address space per process: 80 MB of data written in the candidate's main process still passes."""
    source = "def solve(xs):\n    block = b'x' * (80 << 20)\n    return [x for x in xs if x % 3 == 0][:len(block)]\n"
    verdict = code.verify(divisible_task(), source)
    assert (verdict.reward, verdict.failure_class, verdict.valid) == (1.0, None, True)


VERIFY_IN_A_CHILD = """import sys
from flywheel.schemas import Task
from flywheel.verifiers.envs.code import code
print(code.verify(Task.model_validate_json(sys.argv[1]), sys.argv[2]).model_dump_json())
"""


@pytest.mark.parametrize(("name", "limit", "hard"), [("nofile", resource.RLIMIT_NOFILE, 32),
                                                     ("nproc", resource.RLIMIT_NPROC, 5),
                                                     ("fsize", resource.RLIMIT_FSIZE, 1 << 19)],
                         ids=["nofile", "nproc", "fsize"])
def test_a_host_hard_limit_below_the_sandboxs_is_a_verifier_error_never_reward_0(name: str, limit: int,
                                                                                   hard: int) -> None:
    """The harness cannot raise a hard limit it inherits (ulimit -H on the host, a container's limits): no candidate
    code ran, so a correct completion must come back valid=False (dropped), not runtime_error at reward 0."""
    good = "def solve(xs):\n    return [x for x in xs if x % 3 == 0]\n"
    child = subprocess.run([sys.executable, "-c", VERIFY_IN_A_CHILD, divisible_task().model_dump_json(), good],
                           preexec_fn=lambda: resource.setrlimit(limit, (hard, hard)), capture_output=True, text=True,
                           timeout=60, check=True)
    verdict = Verdict.model_validate_json(child.stdout)
    assert (verdict.reward, verdict.valid, verdict.failure_class) == (None, False, "verifier_error"), verdict.details
    assert verdict.details.startswith(f"SandboxError: the sandbox could not set its limits: {name} "), verdict.details
    assert f"(hard limit here: {hard}); raise this host's hard limit" in verdict.details


def test_runs_leave_no_file_descriptor_open() -> None:
    """Every fd a run opens (pipes, the selector's epoll) is closed when run_code returns, without waiting for the
    garbage collector (off here: the selector sits in a reference cycle, so only a full collection would free it)."""
    before = sorted(os.listdir("/proc/self/fd"))
    gc.disable()
    try:
        for _ in range(20):
            assert run_code("def f(x):\n    return x\n", "f", [[1]]).events[0] == {"event": "test", "i": 0, "value": 1}
        after = sorted(os.listdir("/proc/self/fd"))
    finally:
        gc.enable()
    assert after == before
