"""Task-supplied regexes against the tool_call and workplace verifiers (issue 18): a tool schema's ``pattern`` or
``patternProperties`` and a safety rule's ``forbidden_pattern`` that backtrack catastrophically (``^(a+)+$`` on
"aaa...a!") must not stall ``verify()``, ``flywheel score`` or ``flywheel serve-env``: such a task's checks run in a
bounded worker and crossing the bound is the task's fault (reward None, valid False, verifier_error). Tasks from
the shipped catalogs keep the in-process path (no worker), and the one shipped pattern that ``re`` runs in
quadratic time is matched through its linear equivalent."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from conftest import cli_server, within
from flywheel.schemas import Task, ToolCall
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task
from flywheel.tasks.data.validate import reference_completion
from flywheel.verifiers import bounds, tool_checks
from flywheel.verifiers.envs.tool_call import tool_call
from flywheel.verifiers.envs.workplace import workplace
from flywheel.verifiers.envs.workplace.workplace_tools import TABLES

ROOT = Path(__file__).resolve().parents[2]
FLYWHEEL = str(Path(sys.executable).with_name("flywheel"))
EVIL = "^(a+)+$"  # 2^n steps on "a" * n + "!": hours at n = 40
EVIL_ARG = "a" * 40 + "!"
EVIL_RULE = "^(a+)+b$"  # as slow on EVIL_ARG, and "aaa" keeps it
EMAIL = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
# Every regex in the shipped catalogs, reviewed: anchored or a bounded alternative, one quantifier per character
# class run, adjacent runs disjoint (so each position is tried once) -- except EMAIL, matched through
# tool_checks.LINEAR_EQUIVALENTS. A new catalog regex must be reviewed and added here (and there when quadratic).
AUDITED = {
    r"^\d{4}-\d{2}-\d{2}$", r"^([01]\d|2[0-3]):[0-5]\d$", r"^/", r"^#[a-z0-9_-]+$", r"^TASK-\d{4}$",
    r"^PRJ-\d{3}$", r"^MSG-\d{5}$", r"^EVT-\d{4}$", r"^DEAL-\d{4}$", r"^[^@\s]+@[^@\s]+$", EMAIL, r"[*?]|^/[^/]*/?$",
}





def bound_details(tool: str, crossed: str) -> str:
    return (f"tool {tool!r}: checking these arguments against the task's schema and safety rules {crossed} (a "
            "'pattern', 'patternProperties', 'format' or 'forbidden_pattern' regex of the task backtracks "
            "catastrophically?): fix the task's tool spec")


def crossed(limits: bounds.Limits) -> set[str]:
    """The two ways a runaway check ends: its CPU bound, or its wall-clock bound on a loaded machine."""
    return {f"exceeded the {limits.cpu_s} s CPU bound", f"exceeded the {limits.wall_s:g} s wall-clock bound"}


def hostile_tool(name: str, *, pattern: str | None = None, key_pattern: str | None = None,
                 forbidden: str | None = None, arg: str = "query") -> dict[str, Any]:
    prop: dict[str, Any] = {"type": "string"} | ({"pattern": pattern} if pattern else {})
    parameters: dict[str, Any] = {"type": "object", "properties": {arg: prop}}
    if key_pattern:
        parameters["patternProperties"] = {key_pattern: {"type": "string"}}
    rules = [{"kind": "forbidden_pattern", "arg": arg, "pattern": forbidden}] if forbidden else []
    return {"name": name, "parameters": parameters, "safety": "read", "safety_rules": rules}


def tool_task(tool: dict[str, Any]) -> dict[str, Any]:
    return {"env": "tool_call", "messages": [{"role": "user", "content": "Search for aaa."}], "tools": [tool],
            "reference": {"calls": [{"tool": tool["name"], "args": {"query": "aaa"}}]}, "meta": {"seed_id": "hostile"}}


def wp_task(tool: dict[str, Any]) -> dict[str, Any]:
    email = {"from": "ann@example.com", "subject": "aaa", "body": "hi", "folder": "inbox"}
    state = {**{t: {} for t in TABLES}, "emails": {"e1": email}}  # every table: serve-env refuses a partial state
    return {"env": "workplace", "messages": [{"role": "user", "content": "Find the aaa mail."}], "tools": [tool],
            "reference": {"calls": [{"tool": "search_emails", "args": {"query": "aaa"}}], "state": state,
                          "final_state": state}, "meta": {"seed_id": "hostile"}}


def call(tool: str, args: dict[str, Any]) -> str:
    return json.dumps({"tool": tool, "args": args})


HOSTILE = {
    "pattern": (hostile_tool("lookup", pattern=EVIL), {"query": EVIL_ARG}),
    "patternProperties": (hostile_tool("lookup", key_pattern=EVIL), {"query": "aaa", EVIL_ARG: "x"}),
    "forbidden_pattern": (hostile_tool("lookup", forbidden=EVIL_RULE), {"query": EVIL_ARG}),
}


@pytest.fixture()
def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if any verification asks the bounded worker pool (the in-process path must be taken)."""
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a worker was asked for a trusted task")

    monkeypatch.setattr(bounds, "run", refuse)


# --- verify() ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", sorted(HOSTILE))
def test_a_catastrophic_task_regex_is_the_tasks_fault_within_seconds(where: str) -> None:
    tool, args = HOSTILE[where]
    task = Task.model_validate(tool_task(tool))
    assert within(30, lambda: tool_call.verify(task, call("lookup", {"query": "aaa"}))).reward == 1.0  # worker warm
    started = time.monotonic()
    verdict = within(30, lambda: tool_call.verify(task, call("lookup", args)))
    assert time.monotonic() - started < 6
    assert (verdict.reward, verdict.valid, verdict.failure_class) == (None, False, "verifier_error")
    assert verdict.details in {bound_details("lookup", c) for c in crossed(tool_checks.LIMITS)}
    assert tool_call.verify(task, call("lookup", {"query": "aaa"})).reward == 1.0  # the next one is served


def test_the_workplace_replay_of_a_catastrophic_task_regex_is_bounded_per_completion() -> None:
    task = Task.model_validate(wp_task(hostile_tool("search_emails", pattern=EVIL)))
    good = json.dumps(workplace.trajectory_from_calls(task.reference.calls))
    assert within(30, lambda: workplace.verify(task, good)).reward == 1.0
    evil = json.dumps(workplace.trajectory_from_calls([ToolCall(tool="search_emails", args={"query": EVIL_ARG})] * 50))
    started = time.monotonic()
    verdict = within(30, lambda: workplace.verify(task, evil))
    assert time.monotonic() - started < 10  # one bound for the whole trajectory, not one per call
    assert (verdict.reward, verdict.valid, verdict.failure_class) == (None, False, "verifier_error")
    assert verdict.details in {
        f"replaying 50 call(s) against the task's tool schemas and safety rules {c} (a regex of the task backtracks "
        "catastrophically?): fix the task's tool specs" for c in crossed(workplace.LIMITS)}


def test_a_session_refuses_every_call_once_one_crossed_the_bound() -> None:
    task = Task.model_validate(wp_task(hostile_tool("search_emails", pattern=EVIL)))
    session = workplace.Session.seeded(task)
    assert within(30, lambda: session.call("search_emails", {"query": "aaa"}))["emails"][0]["id"] == "e1"
    crossed_bound = within(30, lambda: session.call("search_emails", {"query": EVIL_ARG}))
    assert crossed_bound["error"] in {f"this call was not made: {bound_details('search_emails', c)}"
                                      for c in crossed(tool_checks.LIMITS)}
    started = time.monotonic()
    for args in ({"query": "aaa"}, {"query": EVIL_ARG}):  # neither is checked again: no worker, no wait
        assert session.call("search_emails", args) == {"error": "this call was not made: an earlier call crossed "
                                                                "the task's bound; verify or close this session"}
    assert time.monotonic() - started < 0.5
    verdict = workplace.score_session(task, session)
    assert (verdict.reward, verdict.valid, verdict.failure_class) == (None, False, "verifier_error")


def test_checks_inside_a_worker_run_inline_so_a_replay_has_one_bound() -> None:
    assert bounds.IN_WORKER is False
    probe = "__import__('flywheel.verifiers.bounds').verifiers.bounds.IN_WORKER"
    assert bounds.run(eval, probe, limits=tool_checks.LIMITS) is True


def test_a_forbidden_pattern_that_is_no_regex_is_refused_with_the_task() -> None:
    with pytest.raises(ValidationError) as info:
        Task.model_validate(tool_task(hostile_tool("lookup", forbidden="(a+")))
    error = info.value.errors()[0]
    assert error["loc"] == ("tools", 0, "safety_rules", 0)
    assert error["msg"] == ("Value error, safety rule 'forbidden_pattern': '(a+' is not a Python regex (missing ), "
                            "unterminated subpattern at position 0)")


def test_an_untrusted_but_sane_task_scores_exactly_as_in_process(catalog) -> None:
    tools, seeds = catalog
    for seed in seeds[:8]:
        task = seed_task(seed, tools)
        name = task.reference.calls[0].tool
        changed = [t.model_copy(update={"parameters": {**t.parameters, "description": "edited"}}) if t.name == name
                   else t for t in task.tools]
        untrusted = task.model_copy(update={"tools": tuple(changed)})
        assert tool_checks.trusted(task.tool(name)) and not tool_checks.trusted(untrusted.tool(name))
        good = reference_completion(task)
        for completion in (good, good.replace('"args": {', '"args": {"extra": 1, ', 1), call(name, {})):
            assert tool_call.verify(untrusted, completion) == tool_call.verify(task, completion)


# --- the shipped catalogs: in process, linear ---------------------------------------------------------------------

def _catalog_regexes() -> set[str]:
    found: set[str] = set()
    for env in ("tool_call", "workplace"):
        stack: list[Any] = json.loads(env_paths(env)[1].read_text(encoding="utf-8"))
        while stack:
            node = stack.pop()
            if isinstance(node, list):
                stack.extend(node)
            elif isinstance(node, dict):
                if isinstance(node.get("pattern"), str):
                    found.add(node["pattern"])
                found.update(node.get("patternProperties", {}))
                stack.extend(node.values())
    return found


def test_every_shipped_regex_was_reviewed() -> None:
    assert _catalog_regexes() == AUDITED
    assert tool_checks.TRUSTED_PATTERNS == {r"[*?]|^/[^/]*/?$"}


@pytest.mark.parametrize("env", ["tool_call", "workplace"])
def test_shipped_catalog_tasks_verify_in_process(env: str, no_worker: None) -> None:
    seeds_path, tools_path = env_paths(env)
    tools = load_tools(tools_path)
    assert all(tool_checks.trusted(spec) for spec in tools.values())
    verify = tool_call.verify if env == "tool_call" else workplace.verify
    for seed in load_seeds(seeds_path, tools):
        task = seed_task(seed, tools)
        assert verify(task, reference_completion(task)).reward == 1.0, seed.id


def test_the_shipped_email_pattern_is_linear_on_a_hostile_argument(catalog, no_worker: None) -> None:
    tools, _ = catalog
    spec = tools["email.send"]
    assert spec.parameters["properties"]["to"]["items"]["pattern"] == EMAIL
    args = {"to": ["x@y.example"], "subject": "s", "body": "b"}
    task = Task.model_validate({"env": "tool_call", "messages": [{"role": "user", "content": "Mail x."}],
                                "tools": [spec.model_dump()],
                                "reference": {"calls": [{"tool": "email.send", "args": args}]},
                                "meta": {"seed_id": "hostile"}})
    hostile = call("email.send", {**args, "to": ["a@" + "." * 60_000 + "@"]})  # 15 s in re's own matching
    assert len(hostile) < tool_call.MAX_CHARS
    started = time.monotonic()
    verdict = within(10, lambda: tool_call.verify(task, hostile))
    assert time.monotonic() - started < 1
    assert (verdict.reward, verdict.valid, verdict.failure_class) == (0.6666666667, True, "wrong_args")
    assert verdict.details == r"args.to[0]: must match pattern ^[^@\s]+@[^@\s]+\.[^@\s]+$"


@pytest.mark.parametrize(("pattern", "linear"), sorted(tool_checks.LINEAR_EQUIVALENTS.items()))
def test_linear_equivalents_give_the_same_answers(pattern: str, linear: str) -> None:
    for end in ("$", r"\Z"):  # as a patternProperties key, and as fastjsonschema compiles a "pattern"
        slow, fast = re.compile(pattern.replace("$", end)), re.compile(linear.replace("$", end))
        for n in range(9):
            for chars in itertools.product("a.@ \n", repeat=n):
                text = "".join(chars)
                assert (slow.search(text) is None) == (fast.search(text) is None), (end, text)


# --- flywheel score and serve-env ---------------------------------------------------------------------------------

@pytest.mark.integration
def test_flywheel_score_finishes_with_the_exact_verdicts(tmp_path: Path) -> None:
    tool, args = HOSTILE["pattern"]
    task = tool_task(tool)
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [{"task": task, "completion": call("lookup", args)},
             {"task": task, "completion": call("lookup", {"query": "aaa"})}]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    started = time.monotonic()
    done = subprocess.run([FLYWHEEL, "score", "--verifier", "tool_call", "--input", str(source), "--output",
                           str(target)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 60
    assert done.returncode == 0, done.stderr
    verdicts = [json.loads(line)["verdict"] for line in target.read_text(encoding="utf-8").splitlines()]
    assert [(v["reward"], v["valid"], v["failure_class"]) for v in verdicts] == [(None, False, "verifier_error"),
                                                                                  (1.0, True, None)]
    assert verdicts[0]["details"] in {bound_details("lookup", c) for c in crossed(tool_checks.LIMITS)}


@pytest.mark.server
def test_serve_env_answers_a_catastrophic_call_without_stalling_other_sessions(
        wp_catalog_task: dict[str, Any]) -> None:
    with cli_server(["serve-env"], "/health", timeout_s=60) as base:
        hostile = httpx.post(base + "/seed_session",
                             json={"task": wp_task(hostile_tool("search_emails", pattern=EVIL))},
                             timeout=30).json()["session_id"]
        other = httpx.post(base + "/seed_session", json={"task": wp_catalog_task}, timeout=30).json()["session_id"]
        warm = httpx.post(base + "/search_emails", json={"session_id": hostile, "args": {"query": "aaa"}}, timeout=30)
        assert warm.json()["observation"]["emails"][0]["id"] == "e1"
        box: dict[str, Any] = {}

        def evil() -> None:
            box["response"] = httpx.post(base + "/search_emails", json={"session_id": hostile,
                                                                        "args": {"query": EVIL_ARG}}, timeout=30)
            box["done"] = time.monotonic()

        started = time.monotonic()
        thread = threading.Thread(target=evil)
        thread.start()
        time.sleep(0.3)
        quick = httpx.post(base + "/list_events", json={"session_id": other, "args": {"date": "2025-01-01"}},
                           timeout=30)
        quick_done = time.monotonic()
        thread.join(30)
        assert not thread.is_alive()
        assert quick.status_code == 200 and "events" in quick.json()["observation"]
        assert quick_done < box["done"], "another session waited for the catastrophic call"
        assert box["done"] - started < 6
        response = box["response"]
        assert response.status_code == 200, response.text
        details = {bound_details("search_emails", c) for c in crossed(tool_checks.LIMITS)}
        assert response.json()["observation"]["error"] in {f"this call was not made: {d}" for d in details}
        verdict = httpx.post(base + "/verify", json={"session_id": hostile}, timeout=30).json()
        assert (verdict["reward"], verdict["valid"], verdict["failure_class"]) == (None, False, "verifier_error")
        assert verdict["details"] in details
        assert httpx.get(base + "/health", timeout=5).json()["status"] == "ok"


def _slow_under_bound_arg(target_s: float = 0.4) -> str:
    """An argument on which EVIL takes between target_s / 2 and target_s here: slow, but under the 1 s bound."""
    n = 10
    while True:
        started = time.process_time()
        re.match(EVIL, "a" * (n + 1) + "!")
        if time.process_time() - started >= target_s:
            return "a" * n + "!"
        n += 1


@pytest.mark.server
def test_serve_env_flooded_with_slow_checks_keeps_answering(wp_catalog_task: dict[str, Any]) -> None:
    """Many concurrent calls whose untrusted checks take ~0.4 s each (under the bound, so none is refused) on a
    few sessions: more than the server's ~40 threads. /health and a trusted session still answer in seconds;
    flooded calls are answered or told the environment is busy."""
    slow = _slow_under_bound_arg()
    with cli_server(["serve-env"], "/health", timeout_s=60) as base, httpx.Client(timeout=60) as client:
        task = wp_task(hostile_tool("search_emails", pattern=EVIL))
        hostile = [client.post(base + "/seed_session", json={"task": task}).json()["session_id"] for _ in range(8)]
        trusted = client.post(base + "/seed_session", json={"task": wp_catalog_task}).json()["session_id"]
        warm = client.post(base + "/search_emails", json={"session_id": hostile[0], "args": {"query": "aaa"}})
        assert warm.json()["observation"]["emails"][0]["id"] == "e1"
        answers: list[dict[str, Any]] = []

        def flood(session_id: str) -> None:
            response = client.post(base + "/search_emails", json={"session_id": session_id, "args": {"query": slow}})
            answers.append(response.json()["observation"])

        threads = [threading.Thread(target=flood, args=(hostile[i % 8],)) for i in range(96)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # every server thread is taken by now
        started = time.monotonic()
        assert client.get(base + "/health").json()["status"] == "ok"
        health_s = time.monotonic() - started
        quick = client.post(base + "/list_events", json={"session_id": trusted, "args": {"date": "2025-01-01"}})
        trusted_s = time.monotonic() - started
        for thread in threads:
            thread.join(60)
        assert quick.status_code == 200 and "events" in quick.json()["observation"]
        assert health_s < 1 and trusted_s < 6, (health_s, trusted_s)
        served = {"error": "invalid arguments: data.query must match pattern ^(a+)+$"}  # checked: it ends in "!"
        busy = "the environment is busy: this call was not made; retry it"
        worker_busy = f"{busy} (no verifier worker freed up within 1 s (all {os.cpu_count()} busy))"
        assert len(answers) == 96
        assert {a["error"] for a in answers} <= {served["error"], busy, worker_busy}, answers
        assert served in answers and {"error": busy} in answers  # served as workers free up, the rest told to retry
        verdict = client.post(base + "/verify", json={"session_id": hostile[0]}).json()
        assert verdict["valid"] is True  # busy calls were not made: nothing crossed a bound


@pytest.fixture()
def wp_catalog_task() -> dict[str, Any]:
    seeds_path, tools_path = env_paths("workplace")
    tools = load_tools(tools_path)
    seed = next(s for s in load_seeds(seeds_path, tools) if "list_events" in s.tools)
    return {**seed_task(seed, tools).model_dump(mode="json"), "id": ""}
