"""The workplace environment: agent loop in process and over the resources server, 64 concurrent sessions
without leaks, malformed requests, and the embedded model driving a real episode."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import cli_server
from flywheel.schemas import Task
from flywheel.tasks.agents.agent import (
    BackendPolicies,
    BackendPolicy,
    HTTPEnv,
    LocalEnv,
    PolicyReply,
    run_episode,
    run_episodes,
)
from flywheel.tasks.data.generate import candidate
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task
from flywheel.tasks.inference.policy import OpenAIBackend, Sampling, parse_action
from flywheel.tasks.inference.protocol import Generation
from flywheel.verifiers.envs.workplace import workplace


@pytest.fixture(scope="module")
def wp_catalog():
    seeds_path, tools_path = env_paths("workplace")
    tools = load_tools(tools_path)
    return tools, load_seeds(seeds_path, tools)


class GoldPolicy:
    """Plays the task's reference calls one per turn, as text actions, then answers: an oracle for the env."""

    def __init__(self, task: Task, calls: int | None = None) -> None:
        self.calls = list(task.reference.calls)[:calls]

    def __call__(self, messages, tools) -> PolicyReply:
        if not self.calls:
            return PolicyReply("All done.", None, 3)
        call = self.calls.pop(0)
        return PolicyReply(json.dumps({"tool": call.tool, "args": call.args}), None, 10)


def test_gold_policy_solves_every_seed_and_replay_agrees(wp_catalog) -> None:
    tools, seeds = wp_catalog
    tasks = [seed_task(s, tools) for s in seeds] + [candidate(k, seeds, tools, 11)[0] for k in range(48)]
    for task in tasks:
        episode = run_episode(GoldPolicy(task), LocalEnv(), task)
        assert episode.verdict.reward == 1.0, (task.meta.seed_id, episode.verdict.details)
        assert episode.stop_reason == "answer"
        assert workplace.verify(task, json.dumps(episode.messages)) == episode.verdict  # stored rollouts re-score


def test_stops_at_max_steps_and_scores_what_was_done(wp_catalog) -> None:
    tools, seeds = wp_catalog
    task = seed_task(next(s for s in seeds if s.id == "wp-reschedule-notify"), tools)
    episode = run_episode(GoldPolicy(task), LocalEnv(), task, max_steps=2)
    assert episode.stop_reason == "max_steps" and episode.steps == 2
    assert episode.verdict.reward == 0.5 and episode.verdict.failure_class == "wrong_state"


class ScriptedBackend:
    """A backend answering each request with the gold calls of the task its label names, one per turn (or at once
    "All done." for the tasks in ``lazy``); records the size of every call, so a test sees the batching."""

    name = "scripted"

    def __init__(self, tasks: list[Task], lazy: frozenset[int] = frozenset()) -> None:
        self.plans = {f"task {i}": [json.dumps({"tool": c.tool, "args": c.args}) for c in t.reference.calls]
                      for i, t in enumerate(tasks) if i not in lazy}
        self.calls: list[int] = []

    def generate(self, requests, sampling):
        self.calls.append(len(requests))
        out = []
        for r in requests:
            turn = sum(1 for m in r.messages if m["role"] == "assistant")
            plan = self.plans.get(r.label, [])
            text = plan[turn] if turn < len(plan) else "All done."
            out.append(Generation(text, None, r.seed, 0.0, 1, 5, "stop"))
        return out


def test_lockstep_episodes_are_the_sequential_ones_in_one_backend_call_per_step(wp_catalog) -> None:
    """run_episodes drives each episode exactly as run_episode does (same messages, verdict, steps, stop), every
    episode in its own session, while each step of all episodes under way is one backend call. Tasks 0 and 1 are
    the same task: 0 does the gold calls and 1 answers at once, in the same batches; 1's untouched session is
    scored on its own."""
    tools, seeds = wp_catalog
    first = candidate(0, seeds, tools, 3)[0]
    tasks = [first, first] + [candidate(k, seeds, tools, 3)[0] for k in range(1, 7)]
    backend = ScriptedBackend(tasks, lazy=frozenset({1, 5}))
    policy = BackendPolicies(backend, Sampling(0.0, 1.0, 64), list(range(len(tasks))), [f"task {i}" for i in
                                                                                          range(len(tasks))])
    batched = run_episodes(policy, LocalEnv(), tasks, max_steps=6)
    longest = max(len(t.reference.calls) for i, t in enumerate(tasks) if i not in {1, 5}) + 1
    assert len(backend.calls) == longest and backend.calls[0] == len(tasks)  # one call per step, all at once
    for i, (task, ep) in enumerate(zip(tasks, batched)):
        single = BackendPolicy(ScriptedBackend(tasks, lazy=frozenset({1, 5})), Sampling(0.0, 1.0, 64), i,
                               label=f"task {i}")
        alone = run_episode(single, LocalEnv(), task, max_steps=6)
        assert (ep.messages, ep.verdict, ep.steps, ep.stop_reason, ep.completion_tokens) == (
            alone.messages, alone.verdict, alone.steps, alone.stop_reason, alone.completion_tokens)
        assert [g.seed for g in policy.generations[i]] == [g.seed for g in single.generations]
        assert ep.verdict.reward == (1.0 if i not in {1, 5} else alone.verdict.reward)
    assert batched[1].verdict.reward < 1.0 and batched[1].steps == 1  # not task 0's session


def test_hostile_replies_in_a_lockstep_batch_are_observations_and_touch_no_other_session(wp_catalog) -> None:
    """Episode 1 of a lockstep batch writes hostile calls (an unknown tool, a path-like name, arguments that are not
    an object) beside episode 0 doing the gold calls on the same task: 1 gets error observations in its own session
    and is scored on it; 0 still solves the task."""
    tools, seeds = wp_catalog
    task = candidate(0, seeds, tools, 3)[0]
    backend = ScriptedBackend([task, task], lazy=frozenset({1}))
    backend.plans["task 1"] = ['{"tool": "no_such_tool", "args": {}}', '{"tool": "../verify", "args": {}}',
                               json.dumps({"tool": task.reference.calls[0].tool, "args": ["not", "an", "object"]})]
    policy = BackendPolicies(backend, Sampling(0.0, 1.0, 64), [0, 1], ["task 0", "task 1"])
    gold, hostile = run_episodes(policy, LocalEnv(), [task, task], max_steps=6)
    assert gold.verdict.reward == 1.0 and gold.stop_reason == "answer"
    errors = [json.loads(m["content"]) for m in hostile.messages if m["role"] == "tool"]
    assert len(errors) == 3 and all(set(e) == {"error"} for e in errors)
    assert hostile.stop_reason == "answer" and hostile.steps == 4 and hostile.verdict.reward < 1.0


def test_lockstep_episodes_stop_at_max_steps_and_max_tokens(wp_catalog) -> None:
    tools, seeds = wp_catalog
    task = seed_task(next(s for s in seeds if s.id == "wp-reschedule-notify"), tools)
    policy = BackendPolicies(ScriptedBackend([task, task]), Sampling(0.0, 1.0, 64), [0, 1], ["task 0", "task 1"])
    capped, tokens = run_episodes(policy, LocalEnv(), [task, task], max_steps=2)[0], run_episodes(
        BackendPolicies(ScriptedBackend([task]), Sampling(0.0, 1.0, 64), [0], ["task 0"]), LocalEnv(), [task],
        max_steps=6, max_tokens=5)[0]
    assert (capped.stop_reason, capped.steps, capped.verdict.reward) == ("max_steps", 2, 0.5)
    assert (tokens.stop_reason, tokens.steps) == ("max_tokens", 1)


def test_parse_action_reads_text_tool_calls() -> None:
    calls = parse_action('```json\n{"tool": "list_events", "args": {"date": "2026-01-01"}}\n```')
    assert calls and calls[0]["function"]["name"] == "list_events"
    assert parse_action("I have moved the meeting.") is None
    assert parse_action('{"answer": 3}') is None


@pytest.fixture(scope="module")
def env_server():
    with cli_server(["serve-env", "--max-sessions", "200"], "/health", timeout_s=60) as base:
        yield base


def _session_plan(i: int, task: Task) -> list:
    """Each session does something different: all gold calls, a prefix, or the gold calls plus a wrong one."""
    calls = list(task.reference.calls)
    if i % 3 == 1:
        return calls[: max(1, len(calls) - 1)]
    if i % 3 == 2:
        return calls + [type(calls[0])(tool="update_event", args={"event_id": "EVT-0000"})]
    return calls


@pytest.mark.server
def test_64_concurrent_sessions_over_http_do_not_leak(env_server, wp_catalog) -> None:
    tools, seeds = wp_catalog
    tasks = [candidate(k, seeds, tools, 5)[0] for k in range(64)]
    barrier = threading.Barrier(64)

    def one(i: int) -> tuple[dict, dict]:
        env = HTTPEnv(env_server)
        task = tasks[i]
        session_id = env.seed(task)
        barrier.wait(timeout=60)  # all 64 sessions are open before anyone acts
        for call in _session_plan(i, task):
            env.call(session_id, call.tool, call.args)
        state = env.client.get(f"/sessions/{session_id}/state").json()
        barrier.wait(timeout=60)  # and still open while the others act
        return state, env.verify(session_id).model_dump()

    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64)))
    for i, (state, verdict) in enumerate(results):
        local = workplace.Session.seeded(tasks[i])
        for call in _session_plan(i, tasks[i]):
            local.call(call.tool, call.args)
        assert state == local.state, f"session {i} does not hold exactly its own changes"
        expected = workplace.score_session(tasks[i], local)
        assert (verdict["reward"], verdict["failure_class"]) == (expected.reward, expected.failure_class)
    assert httpx.get(env_server + "/health").json()["sessions"] == 0


@pytest.mark.server
@pytest.mark.parametrize(("method", "path", "body"), [
    ("post", "/seed_session", "not json"),
    ("post", "/seed_session", {}),
    ("post", "/seed_session", {"task": {"env": "workplace"}}),
    ("post", "/seed_session", {"task": {"env": "cli", "messages": [{"role": "user", "content": "ls"}],
                                        "reference": {"answer": "ls"}, "meta": {"seed_id": "x"}}}),
    ("post", "/list_events", {"args": {"date": "2026-01-01"}}),
    ("post", "/list_events", {"session_id": "nope", "args": {}}),
    ("post", "/list_events", {"session_id": "nope", "args": [1, 2]}),
    ("post", "/no_such_tool", {"session_id": "nope", "args": {}}),
    ("post", "/verify", {"session_id": 5}),
    ("post", "/verify", {"session_id": "nope"}),
    ("get", "/sessions/nope/state", None),
    ("delete", "/sessions/nope", None),
])
def test_malformed_requests_get_4xx_with_a_message(env_server, method, path, body) -> None:
    kwargs = {"content": body} if isinstance(body, str) else {"json": body} if body is not None else {}
    response = httpx.request(method.upper(), env_server + path, **kwargs,
                             headers={"content-type": "application/json"} if body is not None else {})
    assert 400 <= response.status_code < 500, response.text
    assert response.json().get("detail"), "the error must say what is wrong"


@pytest.mark.server
def test_bad_tool_calls_are_observations_not_errors(env_server, wp_catalog) -> None:
    tools, seeds = wp_catalog
    env = HTTPEnv(env_server)
    task = seed_task(seeds[0], tools)
    session_id = env.seed(task)
    assert "error" in env.call(session_id, "update_event", {"event_id": "EVT-0000", "time": "10:00"})
    assert "error" in env.call(session_id, "update_event", {"event_id": "EVT-4821", "time": "10 pm"})
    assert "error" in env.call(session_id, "verify", {})  # a tool name is never a server path
    assert env.verify(session_id).failure_class == "incomplete"


@pytest.mark.slow
@pytest.mark.server
def test_embedded_model_drives_an_episode_through_both_servers(model_server, env_server, wp_catalog) -> None:
    tools, seeds = wp_catalog
    task = seed_task(seeds[0], tools)
    policy = BackendPolicy(OpenAIBackend(model_server, "smol"), Sampling(temperature=0.0, max_tokens=64), seed=3)
    episode = run_episode(policy, HTTPEnv(env_server), task, max_steps=3)
    assert episode.verdict.valid and episode.completion_tokens > 0
    assert episode.stop_reason in {"answer", "max_steps", "max_tokens"}
    replayed = workplace.verify(task, json.dumps(episode.messages))
    assert replayed.reward == episode.verdict.reward
