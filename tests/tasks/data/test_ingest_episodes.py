"""flywheel ingest on a workplace dataset: production episodes replayed and re-scored; a failed episode with a human
correction becomes a held-out regression task whose gold episode scores 1.0 (so it can be trained on and gated);
episodes without a start state, with a correction that does not replay, or of another env are bucketed, never
added."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from flywheel.flows.ingest import IngestConfig, ingest_trajectories
from flywheel.schemas import Task
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools
from flywheel.tasks.training.episodes import gold_episode
from flywheel.verifiers.envs import get_env

pytestmark = pytest.mark.usefixtures("prefect_api")


def _task(seed_id: str) -> Task:
    seeds_path, tools_path = env_paths("workplace")
    tools = load_tools(tools_path)
    rows, _ = generate_candidates(range(12), load_seeds(seeds_path, tools), tools, 5)
    return next(t for t in (Task.model_validate_json(r["task"]) for r in rows) if t.meta.seed_id == seed_id)


def _call(tool: str, args: dict) -> dict:
    return {"type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}


def _episode(tid: str, task: Task, request: str, actions: list[tuple[str, dict]], success: bool,
             correction: tuple[int, list[tuple[str, dict]]] | None = None, state: bool = True) -> dict:
    """A logged episode: the request, one assistant call per action with an observation after each, a final
    answer; a correction replaces the assistant message at its index with the given calls."""
    messages = [{"role": "user", "content": request}]
    for tool, args in actions:
        messages += [{"role": "assistant", "tool_calls": [_call(tool, args)]},
                     {"role": "tool", "content": "{}"}]
    messages.append({"role": "assistant", "content": "Done."})
    line = {"id": tid, "env": "workplace", "messages": messages, "outcome": {"success": success},
            "tools": [{"type": "function", "function": {"name": t.name}} for t in task.tools]}
    if state:
        line["state"] = task.reference.state
    if correction:
        index, calls = correction
        line["interventions"] = [{"message_index": index, "kind": "correction",
                                  "tool_calls": [_call(t, a) for t, a in calls]}]
    return line


def test_failed_episodes_with_corrections_become_trainable_heldout_tasks(workplace_dataset, tmp_path) -> None:
    src = tmp_path / "workplace" / Path(workplace_dataset).name
    shutil.copytree(workplace_dataset, src)
    move = _task("wp-reschedule")  # list_events, then update_event
    (look, look_args), (upd, upd_args) = ((c.tool, c.args) for c in move.reference.calls)
    offered = _task("wp-reschedule-cancel-offered")  # cancel_event is offered but must not be used
    (o_look, o_look_args), (o_upd, o_upd_args) = ((c.tool, c.args) for c in offered.reference.calls)
    other = next(e for e in offered.reference.state["events"] if e != o_upd_args["event_id"])
    lines = [
        # the agent set the wrong time; a human corrected its second call (message 3)
        _episode("wp-wrong", move, "Production ticket 1: the design sync has to start later, see my note",
                 [(look, look_args), (upd, upd_args | {"time": "06:05"})], False, (3, [(upd, upd_args)])),
        # the agent cancelled the other meeting first; the correction replaces that call with the right one
        _episode("wp-unsafe", offered, "Production ticket 2: clear up my calendar clash but keep both meetings",
                 [(o_look, o_look_args), ("cancel_event", {"event_id": other}), (o_upd, o_upd_args)], False,
                 (3, [(o_upd, o_upd_args)])),
        _episode("wp-ok", move, "Production ticket 3: move that sync", [(look, look_args), (upd, upd_args)], True),
        _episode("wp-nostate", move, "Production ticket 4: move it", [(look, look_args)], False,
                 (3, [(upd, upd_args)]), state=False),
        _episode("wp-badfix", move, "Production ticket 5: move the sync", [(look, look_args)], False,
                 (3, [(upd, upd_args | {"event_id": "EVT-0000"})])),  # the correction itself fails
        _episode("wp-unknown", move, "Production ticket 6: move the sync", [(look, look_args)], False,
                 (3, [("drop_everything", {})])),
        json.loads((Path(__file__).resolve().parents[3] / "datasets" / "examples" / "trajectories.jsonl")
                   .read_text().splitlines()[0]),  # a tool_call trajectory: not this dataset's env
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = ingest_trajectories(IngestConfig(trajectories=str(tmp_path / "t.jsonl"), dataset=str(src)))

    scored = pl.read_parquet(summary["trajectories"])
    bucket = dict(zip(scored["trajectory"], scored["bucket"]))
    assert bucket == {"wp-wrong": "wrong_state", "wp-unsafe": "unsafe_action", "wp-ok": "passed",
                      "wp-nostate": "no_reference", "wp-badfix": "invalid_reference", "wp-unknown": "unknown_tool",
                      "prod-0001": "other_env"}
    assert summary["added"] == 2 and dict(zip(scored["trajectory"], scored["kept"]))["wp-wrong"] == "added"
    new = pl.read_parquet(Path(summary["version_dir"]) / "heldout.parquet")
    tasks = {t.meta.seed_id: t for t in (Task.model_validate_json(x) for x in new["task"])}
    wrong, unsafe = tasks["prod:wp-wrong"], tasks["prod:wp-unsafe"]
    # the reference is the corrected episode and its golden state is the one the generator computes
    assert [(c.tool, c.args) for c in wrong.reference.calls] == [(look, look_args), (upd, upd_args)]
    assert wrong.reference.final_state == move.reference.final_state
    assert [c.tool for c in unsafe.reference.calls] == [o_look, o_upd]
    for task in (wrong, unsafe):  # trainable and gateable: the gold episode scores 1.0 in a fresh session
        assert gold_episode(task).verdict.reward == 1.0 and task.meta.category == "regression"
    # re-scoring the stored task gives the verdict ingest recorded
    agent = json.dumps(lines[0]["messages"])
    assert get_env("workplace").verify(wrong, agent).reward == dict(zip(scored["trajectory"], scored["reward"]))[
        "wp-wrong"]
