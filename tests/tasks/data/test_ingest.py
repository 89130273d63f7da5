"""flywheel ingest: production trajectories re-scored, bucketed, failures -> held-out regression tasks in a new
dataset version (deduplicated, decontaminated against train); bad files fail with the line and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import load_split
from flywheel.flows.ingest import IngestConfig, ingest_trajectories
from flywheel.tasks.data.ingest import IngestError
from flywheel.tasks.data.publish import read_manifest
from flywheel.verifiers.envs.tool_call import tool_call

pytestmark = pytest.mark.usefixtures("prefect_api")
EXAMPLES = Path(__file__).resolve().parents[3] / "datasets" / "examples" / "trajectories.jsonl"


def _copy(version: str, tmp_path: Path) -> Path:
    dst = tmp_path / "tool_call" / Path(version).name
    shutil.copytree(version, dst)
    return dst


def _from_task(task: dict, tid: str, args_update: dict, tools_order: int = 1) -> dict:
    """A logged trajectory for TASK's request: the agent's call with ARGS_UPDATE, corrected to the reference."""
    ref = task["reference"]["calls"][0]
    fn = lambda args: {"type": "function", "function": {"name": ref["tool"], "arguments": json.dumps(args)}}
    return {"id": tid, "messages": [task["messages"][1],
                                    {"role": "assistant", "tool_calls": [fn(ref["args"] | args_update)]}],
            "tools": [{"type": "function", "function": {"name": t["name"]}} for t in task["tools"][::tools_order]],
            "outcome": {"success": False},
            "interventions": [{"message_index": 1, "kind": "correction", "tool_calls": [fn(ref["args"])]}]}


def test_failures_become_deduplicated_heldout_regression_tasks(tool_dataset, tmp_path) -> None:
    src = _copy(tool_dataset, tmp_path)
    held, train = pl.read_parquet(src / "heldout.parquet"), pl.read_parquet(src / "train.parquet")
    lines = EXAMPLES.read_text().splitlines()
    near = json.loads(lines[0]) | {"id": "prod-0001-again"}  # the same request again, one word more
    near["messages"][1] = near["messages"][1] | {"content": near["messages"][1]["content"] + " Thanks."}
    known = _from_task(json.loads(held["task"][0]), "prod-known", {"zzz": 1})  # already a held-out task
    leaked = _from_task(json.loads(train["task"][0]), "prod-leak", {"zzz": 2}, -1)  # a train request, tools reordered
    lines += [json.dumps(near), json.dumps(known), json.dumps(leaked)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    summary = ingest_trajectories(IngestConfig(trajectories=str(tmp_path / "t.jsonl"), dataset=str(src)))

    assert summary["added"] == 3
    # the two calls with an unknown extra argument "zzz": wrong_args since tool_call 1.3 (an argument nobody asked
    # for is a wrong one), schema_violation before
    assert summary["buckets"] == {"unsafe_action": 2, "wrong_args": 3, "format_error": 1, "passed": 1,
                                  "no_reference": 1, "unknown_tool": 1}
    scored = pl.read_parquet(summary["trajectories"])
    kept = dict(zip(scored["trajectory"], scored["kept"]))
    assert [kept[t] for t in ("prod-0001", "prod-0002", "prod-0003")] == ["added"] * 3
    assert kept["prod-0001-again"].startswith("near duplicate of")
    assert kept["prod-known"] == "duplicate: already in the dataset"
    # decontaminated against train: a shared 13-word n-gram, or (a request under 13 words) a near duplicate
    assert kept["prod-leak"].startswith(("ngram_overlap", "near_duplicate_of_train")) and kept["prod-0004"] == ""
    assert scored.height == 9  # every trajectory is accounted for

    new = Path(summary["version_dir"])
    assert new.parent == src.parent and new != src
    manifest = read_manifest(new)
    assert manifest.parents == (str(src.resolve()),) and manifest.counts["regression_added"] == 3
    # the verifier that checked the references: generate's (the source version) and ingest's (this one)
    assert read_manifest(src).verifiers == manifest.verifiers == {"tool_call": tool_call.VERSION}
    assert (new / "train.parquet").read_bytes() != b"" and pl.read_parquet(new / "train.parquet").equals(train)
    new_held = pl.read_parquet(new / "heldout.parquet")
    assert new_held.height == held.height + 3 and new_held.head(held.height).equals(held)
    tasks, _, _ = load_split(EvalConfig(dataset=str(new), out=str(tmp_path / "eval")))
    regression = [t for t in tasks if t.meta.generator == "ingest"]
    assert {t.meta.seed_id for t in regression} == {"prod:prod-0001", "prod:prod-0002", "prod:prod-0003"}
    archive = next(t for t in regression if t.meta.seed_id == "prod:prod-0001")
    assert archive.reference.calls[0].tool == "projects.archive_project"

    again = ingest_trajectories(IngestConfig(trajectories=str(tmp_path / "t.jsonl"), dataset=str(src)))
    assert again["version_dir"] == summary["version_dir"]  # same input, same version: published once
    assert sorted(p.name for p in src.parent.iterdir() if p.name.startswith("v-")) == sorted([src.name, new.name])


@pytest.mark.parametrize(("line", "message"), [
    ('{"id": "a", "messages": [{"role": "user", "content": "hi"}]}', r"t.jsonl:2: messages: .*at least 2"),
    ('{"id": "a", "messages": [{"role": "robot", "content": "x"}, {"role": "user", "content": "y"}]}',
     r"t.jsonl:2: messages.0.role: Input should be"),
    ("not json", r"t.jsonl:2: not JSON: "),
    (EXAMPLES.read_text().splitlines()[0], r"t.jsonl:2: trajectory id 'prod-0001' appears twice"),
])
def test_a_bad_line_fails_with_its_number_and_writes_nothing(tool_dataset, tmp_path, line: str, message: str) -> None:
    src = _copy(tool_dataset, tmp_path)
    (tmp_path / "t.jsonl").write_text(EXAMPLES.read_text().splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(IngestError, match=message):
        ingest_trajectories(IngestConfig(trajectories=str(tmp_path / "t.jsonl"), dataset=str(src)))
    assert [p.name for p in src.parent.iterdir()] == [src.name]


CRAFTED = [  # (where, the crafted value, bucket): each is a row with a reason, never a crashed ingest
    ("correction", {"function": {"name": "x", "arguments": "[1]"}}, "no_reference"),  # args not an object
    ("correction", {"function": {"name": ["x"], "arguments": "{}"}}, "no_reference"),  # name not a string
    ("correction", {"function": "x"}, "no_reference"),
    ("correction", "x", "no_reference"),
    ("correction", {"function": {"name": "x", "arguments": "{"}}, "no_reference"),  # args not JSON
    ("action", {"function": {"name": "x", "arguments": "[1]"}}, "no_reference"),
    ("tools", {"function": "x"}, "unknown_tool"),
    ("tools", {"function": {"name": {"a": 1}}}, "unknown_tool"),
    ("tools", 7, "unknown_tool"),
]


@pytest.mark.parametrize("env", ["tool_call", "workplace"])
@pytest.mark.parametrize(("where", "value", "bucket"), CRAFTED)
def test_crafted_calls_and_tools_are_bucketed_with_a_reason(env: str, where: str, value, bucket: str) -> None:
    from flywheel.tasks.data.ingest import Trajectory, rescore
    from flywheel.tasks.data.seeds import env_paths, load_tools

    good = {"function": {"name": "send_email", "arguments": "{}"}}
    line = {"id": "t", "env": env, "state": {} if env == "workplace" else None,
            "messages": [{"role": "user", "content": "do it"},
                         {"role": "assistant", "tool_calls": [value if where == "action" else good]}],
            "interventions": [{"message_index": 1, "kind": "correction",
                               "tool_calls": [value if where == "correction" else good]}],
            "tools": [value] if where == "tools" else []}
    try:
        traj = Trajectory.model_validate(line)
    except ValueError:  # the schema itself refuses it: also a clear error, never a crash mid-ingest
        return
    if where == "action" and env == "workplace":
        bucket = "invalid_reference"  # an episode's own calls are replayed as text; the correction (an empty
        # send_email here) is what must parse and replay
    row = rescore(traj, load_tools(env_paths(env)[1]), env)
    assert row["bucket"] == bucket and row["detail"] and row["task"] is None, row
