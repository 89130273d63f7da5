"""The code verifier: the completion's Python runs against the task's unit tests in the sandbox.

- The program is the last fenced ```python (or unlabelled ```) block of the completion, else the whole text.
- It runs in ``verifiers.sandbox`` under ``LIMITS``; only the tests' arguments go in, the return values come back
  one reply per request (with its nonce), and the comparison happens here, in the trusted process.
- Reward = fraction of tests whose return value equals the expected one (an expected int exactly, an expected float
  within relative tolerance 1e-9; comparing never raises). A leftover process or a flooded channel scores 0.
- failure_class: tampering, syntax_error, timeout, resource_limit, runtime_error, test_failure; a sandbox that
  cannot start is valid=False ``verifier_error``, never reward 0.
The full contract and the reward-hack decisions: this env's README.md.
"""

from __future__ import annotations

import errno
import math
import re
from typing import Any

from flywheel.schemas import Task, Verdict
from flywheel.verifiers.common import batch_rewards, guarded_verify
from flywheel.verifiers.sandbox import Limits, RunResult, run_code

NAME = "code"
VERSION = "1.3.0"  # history: CHANGELOG.md
LIMITS = Limits()
_FENCE = re.compile(r"```(python|py)?[ \t]*\n(.*?)```", re.S)
_RESOURCE_ERRORS = {"MemoryError"}
_RESOURCE_ERRNOS = {errno.EAGAIN, errno.ENOMEM, errno.EFBIG, errno.EMFILE, errno.ENOSPC, errno.EDQUOT}
SIGXCPU, SIGXFSZ, SIGKILL = 24, 25, 9


def extract_code(completion: str) -> str:
    blocks = _FENCE.findall(completion)
    return blocks[-1][1] if blocks else completion


def same(expected: Any, got: Any) -> bool:
    """JSON equality with a numeric tolerance; bools and numbers never mix. Never raises, whatever the candidate
    returned: nesting is bounded by the host's JSON parser (deeper is tampering), numbers by ``_close``."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return _close(expected, got)
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(same(e, g) for e, g in zip(expected, got))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(same(v, got[k]) for k, v in expected.items())
    return type(expected) is type(got) and expected == got


def _close(expected: int | float, got: int | float) -> bool:
    """An expected int equals only the same integer: an int, or a float of exactly that value (Python compares
    int and float exactly, so 2**53 + 1 != 2.0**53). An expected float: relative tolerance 1e-9 where both fit a
    float; an int beyond a float's range (10**400) never equals a float (a float is at most 1.8e308)."""
    if type(expected) is int:
        return expected == got
    try:
        return math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-12)
    except OverflowError:
        return type(expected) is int and type(got) is int and expected == got


def _is_resource(error: dict[str, Any]) -> bool:
    number = error.get("errno")
    return error.get("type") in _RESOURCE_ERRORS or (type(number) is int and number in _RESOURCE_ERRNOS)


def _error_text(error: dict[str, Any]) -> str:
    return f"{error.get('type')}: {error.get('message', '')}"[:300]


def classify(result: RunResult, n_tests: int, expected: list[Any]) -> tuple[float, str | None, str]:
    """(reward, failure_class, details) from the sandbox's events; see the module contract."""
    if result.tampering:
        return 0.0, "tampering", result.tampering
    by_kind = {e["event"]: e for e in result.events}
    if "syntax_error" in by_kind:
        return 0.0, "syntax_error", _error_text(by_kind["syntax_error"].get("error", {}))
    tests: dict[int, dict[str, Any]] = {}
    for event in result.events:
        if event["event"] == "test" and isinstance(event.get("i"), int) and event["i"] not in tests:
            tests[event["i"]] = event
    passed = sum(1 for i in range(n_tests)
                 if i in tests and "value" in tests[i] and same(expected[i], tests[i]["value"]))
    errors = [t["error"] for t in tests.values() if isinstance(t.get("error"), dict)]
    reward = passed / n_tests
    if result.overflow:
        return 0.0, "resource_limit", "flooded the result channel"
    if result.timed_out or result.exit_code in (128 + SIGXCPU, 128 + SIGKILL):
        return reward, "timeout", f"{passed}/{n_tests} tests passed before the time limit"
    if "leftover" in by_kind:
        return 0.0, "resource_limit", f"left {by_kind['leftover'].get('count')} process(es) running after the tests"
    if "load_error" in by_kind:
        error = by_kind["load_error"].get("error", {})
        return 0.0, "resource_limit" if _is_resource(error) else "runtime_error", _error_text(error)
    if result.exit_code == 128 + SIGXFSZ or any(_is_resource(e) for e in errors):
        return reward, "resource_limit", next((_error_text(e) for e in errors if _is_resource(e)), "file size limit")
    if "done" not in by_kind:
        return reward, "runtime_error", ("the program exited before the tests finished "
                                         f"(exit status {result.exit_code})")
    if errors:
        return reward, "runtime_error", (f"{passed}/{n_tests} passed; {len(errors)} raised, "
                                         f"first: {_error_text(errors[0])}")
    if passed < n_tests:
        wrong = next(i for i in range(n_tests) if not same(expected[i], tests[i].get("value")))
        return reward, "test_failure", (f"{passed}/{n_tests} passed; "
                                        f"test {wrong} returned {str(tests[wrong].get('value'))[:100]}")
    return 1.0, None, f"{n_tests}/{n_tests} tests passed"


def _score(task: Task, completion: str) -> Verdict:
    ref = task.reference
    if not ref.entry_point or not ref.tests:
        raise ValueError(f"code task {task.id[:12]} needs reference.entry_point and reference.tests")
    code = extract_code(completion)
    if not code.strip():
        return Verdict(reward=0.0, valid=True, failure_class="syntax_error", details="no code in the completion",
                       verifier=NAME, verifier_version=VERSION)
    result = run_code(code, ref.entry_point, [list(t.args) for t in ref.tests], LIMITS)
    reward, failure, details = classify(result, len(ref.tests), [t.expected for t in ref.tests])
    return Verdict(reward=round(reward, 10), valid=True, failure_class=failure, details=details,
                   components={"tests_passed": round(reward, 10)},
                   verifier=NAME, verifier_version=VERSION)


def verify(task: Task, completion: str) -> Verdict:
    return guarded_verify(NAME, VERSION, _score, task, completion)


def code_reward(completions: list[Any], task: list[Any], **kw: Any) -> list[float | None]:
    """TRL reward function; sandboxes of one batch run in parallel (each is its own process)."""
    return batch_rewards(NAME, verify, completions, task, workers=8, **kw)
