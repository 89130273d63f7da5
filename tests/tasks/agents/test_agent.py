"""Hostile episodes: a model's reply never raises out of the tool-call parser (deep JSON, malformed native calls),
and a production episode whose start state a tool cannot work on is one ingest row's reject, never a traceback."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from flywheel.flows.cli import app
from flywheel.schemas import Task
from flywheel.tasks.agents.agent import LocalEnv, PolicyReply, run_episode, run_episodes
from flywheel.tasks.data.ingest import Trajectory, rescore
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task
from flywheel.tasks.inference.protocol import MAX_DEPTH, as_text_chat, call_arguments, native_call, parse_action
from flywheel.verifiers.envs import get_env
from flywheel.verifiers.envs.workplace import workplace_tools

DEEP = ["[" * 1000, "[" * 1200 + "]" * 1200, "[" * 100_000 + "]" * 100_000, '{"tool": "x", "args": ' + "[" * 5000]


def _nested(levels: int) -> str:
    """A text tool call whose JSON is nested ``levels`` deep (the call object is level 1, args level 2)."""
    return '{"tool": "list_events", "args": {"date": ' + "[" * (levels - 2) + "]" * (levels - 2) + "}}"


def _at_stack_top(fn: Any, room: int = 60) -> Any:
    """``fn()`` called with only ``room`` frames left below the recursion limit (as under Prefect and Dask)."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back

    def dive(n: int) -> Any:
        return fn() if n <= 0 else dive(n - 1)

    return dive(sys.getrecursionlimit() - depth - room)


@pytest.mark.parametrize("text", DEEP, ids=["open-1000", "pairs-1200", "pairs-100k", "call-open-5000"])
def test_deeply_nested_replies_are_plain_text_at_any_stack_depth(text) -> None:
    assert parse_action(text) is None
    assert _at_stack_top(lambda: parse_action(text)) is None
    assert parse_action(f"```json\n{text}\n```") is None


def test_the_depth_bound_is_explicit_and_the_same_at_any_stack_depth() -> None:
    inside, past = _nested(MAX_DEPTH), _nested(MAX_DEPTH + 1)
    assert parse_action(inside)[0]["function"]["name"] == "list_events"
    assert parse_action(past) is None  # well under the recursion limit: the bound, not the stack, says no
    # with room for MAX_DEPTH levels of json's parser (and only just), the verdicts are those of a shallow stack
    assert _at_stack_top(lambda: (parse_action(inside), parse_action(past)), room=120) == (parse_action(inside), None)


@pytest.mark.parametrize(("call", "expected"), [
    ({"function": {"arguments": "[" * 3000 + "]" * 3000}}, "[" * 3000 + "]" * 3000),
    ({"function": {"arguments": "[" * 100_000}}, "[" * 100_000),
    ({"function": {"arguments": json.loads(_nested(MAX_DEPTH + 1))}}, f"<arguments nested deeper than {MAX_DEPTH} "
                                                                      "levels>"),
    ({"function": "x"}, {}), ("not a call", {}), ({"function": {"arguments": '{"a": 1}'}}, {"a": 1}),
])
def test_call_arguments_never_raise(call, expected) -> None:
    assert call_arguments(call) == expected
    assert _at_stack_top(lambda: call_arguments(call)) == expected


def test_malformed_native_calls_become_well_formed_calls() -> None:
    assert native_call({"function": "x"}, 2) == {"id": "call_2", "type": "function",
                                                 "function": {"name": "", "arguments": "{}"}}
    assert native_call({"id": 7, "function": {"name": 5, "arguments": {"a": [1]}}})["function"] == {
        "name": "", "arguments": '{"a": [1]}'}
    assert native_call("junk")["function"]["name"] == ""
    assert native_call({"function": {"name": "f", "arguments": {"x": {1, 2}}}})["function"]["arguments"] == (
        "<arguments that are not JSON>")


@pytest.fixture(scope="module")
def task() -> Task:
    seeds_path, tools_path = env_paths("workplace")
    tools = load_tools(tools_path)
    return seed_task(next(s for s in load_seeds(seeds_path, tools) if s.id == "wp-reschedule"), tools)


def _scripted(replies: list[PolicyReply]) -> Any:
    it = iter(replies)

    def policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PolicyReply:
        as_text_chat(messages, tools)  # what a text-only backend renders for the next step must not break either
        json.dumps(messages)
        return next(it)

    return policy


HOSTILE = {
    "deep-text": [PolicyReply("[" * 1200 + "]" * 1200)],
    "deep-text-args": [PolicyReply(_nested(400))],  # not a call: the final answer
    "native-function-text": [PolicyReply(None, [{"function": "x"}]), PolicyReply("Done.")],
    "native-not-a-dict": [PolicyReply(None, ["x", 5]), PolicyReply("Done.")],
    "native-name-int": [PolicyReply(None, [{"function": {"name": 5, "arguments": "{}"}}]), PolicyReply("Done.")],
    "native-deep-args": [PolicyReply(None, [{"function": {"name": "list_events",
                                                          "arguments": "[" * 3000 + "]" * 3000}}]),
                         PolicyReply("Done.")],
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_reply_never_aborts_an_episode(task, name) -> None:
    replies = HOSTILE[name]
    episode = run_episode(_scripted(replies), LocalEnv(), task)
    assert episode.verdict.valid is True and episode.verdict.reward is not None
    calls = [c for m in episode.messages for c in m.get("tool_calls") or []]
    assert all(isinstance(c["function"]["name"], str) and isinstance(c["function"]["arguments"], str) for c in calls)
    observations = [json.loads(m["content"]) for m in episode.messages if m["role"] == "tool"]
    assert all("error" in o for o in observations)  # a malformed call is an error observation, not a crash
    assert episode.stop_reason == "answer" and episode.steps == len(replies)
    replay = get_env("workplace").verify(task, json.dumps(episode.messages))  # the trajectory replays
    assert replay.valid is True
    batched = run_episodes(lambda turns: [replies[len([m for m in turns[0][1] if m["role"] == "assistant"])]],
                           LocalEnv(), [task])
    assert batched[0].messages == episode.messages


def _line(state: dict[str, Any], task: Task, tid: str = "wp-bad") -> dict[str, Any]:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": c.tool, "arguments": json.dumps(c.args)}}
             for i, c in enumerate(task.reference.calls)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Move the design sync as asked"}]
    for call in calls:
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "content": "{}", "tool_call_id": call["id"]}]
    return {"id": tid, "env": "workplace", "messages": messages + [{"role": "assistant", "content": "Done."}],
            "tools": [], "outcome": {"success": True}, "state": state}


def _broken(state: dict[str, Any], case: str) -> dict[str, Any]:
    out = copy.deepcopy(state)
    if case == "record-without-fields":
        out["events"] = {rid: {} for rid in out["events"]}
    elif case == "missing-table":
        del out["events"]
    elif case == "email-without-subject":
        out["emails"]["m1"] = {"from": "a@b.example", "body": "x", "folder": "inbox"}
    elif case == "subject-not-a-string":
        out["emails"]["m1"] = {"from": "a@b.example", "subject": None, "body": "x", "folder": "inbox"}
    return out


BROKEN = {"record-without-fields": "has no date", "missing-table": "has no events table",
          "email-without-subject": "reference.state.emails.m1 has no subject",
          "subject-not-a-string": "reference.state.emails.m1.subject must be a string"}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_state_the_tools_cannot_work_on_is_a_rejected_row(task, case) -> None:
    catalog = {t.name: t for t in load_tools(env_paths("workplace")[1]).values()}
    row = rescore(Trajectory.model_validate(_line(_broken(task.reference.state, case), task)), catalog, "workplace")
    assert row["bucket"] == "invalid_reference" and row["task"] is None, row
    assert BROKEN[case] in row["detail"]
    good = rescore(Trajectory.model_validate(_line(task.reference.state, task)), catalog, "workplace")
    assert good["bucket"] == "passed"
    with pytest.raises(ValueError, match=BROKEN[case].split(".")[-1]):
        get_env("workplace").replay_reference(task.model_copy(update={"reference": task.reference.model_copy(
            update={"state": _broken(task.reference.state, case)})}))


def test_any_failure_to_replay_an_episode_is_that_rows_reject(task, monkeypatch) -> None:
    def broken(state: Any, **_: Any) -> Any:
        raise KeyError("surprise")

    monkeypatch.setitem(workplace_tools.TOOLS, "list_events", broken)
    catalog = {t.name: t for t in load_tools(env_paths("workplace")[1]).values()}
    row = rescore(Trajectory.model_validate(_line(task.reference.state, task)), catalog, "workplace")
    assert row["bucket"] == "invalid_reference" and "KeyError: 'surprise'" in row["detail"], row


def _dataset(out: Path) -> Path:
    """A published workplace version of 6 seed tasks: OUT/workplace/v-..."""
    from flywheel.flows.runtime import REJECT_SCHEMA
    from flywheel.tasks.data.generate import task_row
    from flywheel.tasks.data.publish import publish

    tools = load_tools(env_paths("workplace")[1])
    rows = [task_row(seed_task(s, tools), k) | {"cluster_id": s.id, "group_id": s.id}
            for k, s in enumerate(load_seeds(env_paths("workplace")[0], tools)[:6])]
    frames = {"train": pl.DataFrame([r | {"split": "train"} for r in rows[:4]]),
              "heldout": pl.DataFrame([r | {"split": "heldout"} for r in rows[4:]]),
              "rejected": pl.DataFrame([], schema=REJECT_SCHEMA)}
    fields = {"env": "workplace", "counts": {"train": 4, "heldout": 2}, "stage_counts": {}, "reject_reasons": {},
              "params": {}, "run_seed": 0, "code_version": "test", "seeds_hash": "test",
              "created_at": "2025-01-01T00:00:00Z"}
    return publish(out, "workplace", frames, fields)


def test_the_ingest_cli_rejects_the_broken_line_and_goes_on(task, tmp_path, prefect_api) -> None:
    version = _dataset(tmp_path / "ds")
    lines = [_line(_broken(task.reference.state, case), task, f"wp-{case}") for case in BROKEN]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in [*lines, _line(task.reference.state, task, "wp-ok")]))
    result = CliRunner().invoke(app, ["ingest", "--trajectories", str(src), "--dataset", str(version)],
                                prog_name="flywheel")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0 and "Traceback" not in result.output and "error:" not in result.output, (
        result.output)
    scored = pl.read_parquet(next((tmp_path / "ds").rglob("trajectories.parquet")))
    buckets = dict(zip(scored["trajectory"], scored["bucket"], strict=True))
    assert buckets == {**{f"wp-{case}": "invalid_reference" for case in BROKEN}, "wp-ok": "passed"}
