"""Hostile input to `flywheel ingest` and `flywheel profile-reward`: an edited manifest never decides where ingest
writes, a failed ingest publishes nothing and says so in one line, no ingest overwrites another's record, a crafted
or oversized line is a bucketed row or one error naming the line (never a crashed ingest, never gigabytes of RAM),
lines are strict JSON as `score` reads them; model output never reaches the terminal as escape sequences, and no
command overwrites its own input.

Ingest runs in process on a 6-task published version (the session's Prefect harness), like test_cli_input.py.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import orjson
import polars as pl
import pytest
from typer.testing import CliRunner

from flywheel.flows.cli import app
from flywheel.flows.ingest import IngestConfig, ingest_trajectories, record_dir
from flywheel.tasks.data.ingest import MAX_LINE_BYTES, IngestError, Trajectory, read_trajectories, rescore
from flywheel.tasks.data.seeds import env_paths, load_tools, seed_task

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), prog_name="flywheel")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _one_error(text: str) -> str:
    """The output is exactly one `error:` line (and no traceback); returns it."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert "Traceback" not in text and len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


def _dataset(out: Path) -> Path:
    """A published tool_call version of 6 seed tasks: OUT/tool_call/v-..."""
    from flywheel.flows.runtime import REJECT_SCHEMA
    from flywheel.tasks.data.generate import task_row
    from flywheel.tasks.data.publish import publish
    from flywheel.tasks.data.seeds import load_seeds

    tools = load_tools(env_paths("tool_call")[1])
    rows = [task_row(seed_task(s, tools), k) | {"cluster_id": s.id, "group_id": s.id}
            for k, s in enumerate(load_seeds(env_paths("tool_call")[0], tools)[:6])]
    frames = {"train": pl.DataFrame([r | {"split": "train"} for r in rows[:4]]),
              "heldout": pl.DataFrame([r | {"split": "heldout"} for r in rows[4:]]),
              "rejected": pl.DataFrame([], schema=REJECT_SCHEMA)}
    fields = {"env": "tool_call", "counts": {"train": 4, "heldout": 2}, "stage_counts": {}, "reject_reasons": {},
              "params": {}, "run_seed": 0, "code_version": "test", "seeds_hash": "test",
              "created_at": "2025-01-01T00:00:00Z"}
    return publish(out, "tool_call", frames, fields)


def _call(args: str | dict) -> dict:
    return {"type": "function", "function": {"name": "projects.archive_project",
                                             "arguments": args if isinstance(args, str) else json.dumps(args)}}


def _traj(tid: str, project: str, agent: str | dict | None = None, fix: str | dict | None = None, **extra) -> dict:
    """A logged tool_call trajectory: the agent archives the wrong project, a human corrects it (agent == fix: a
    call the verifier passes)."""
    return {"id": tid, "env": "tool_call",
            "messages": [{"role": "user", "content": f"The {tid} work is over: archive project {project} please."},
                         {"role": "assistant", "content": None,
                          "tool_calls": [_call(agent or {"project_id": project + "9"})]}],
            "tools": [{"type": "function", "function": {"name": "projects.archive_project"}}],
            "outcome": {"success": False},
            "interventions": [{"message_index": 1, "kind": "correction",
                               "tool_calls": [_call(fix or {"project_id": project})]}]} | extra


def _write(path: Path, *trajectories: dict) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in trajectories))
    return path


FAILURES = [_traj("falcon", "PRJ-447"), _traj("heron", "PRJ-512")]  # two new held-out tasks
PASSES = [_traj("osprey", "PRJ-601", agent={"project_id": "PRJ-601"})]  # adds nothing


def _edit_manifest(version: Path, **fields) -> None:
    manifest = json.loads((version / "manifest.json").read_text()) | fields
    (version / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("fields", "message"), [
    ({"name": "../../ESCAPED"}, "is not a dataset manifest (name: '../../ESCAPED' is not a folder name"),
    ({"name": "/ABSOLUTE"}, "is not a dataset manifest (name: '/ABSOLUTE' is not a folder name"),
    ({"name": "elsewhere"}, "manifest.json names the dataset 'elsewhere' but the version lies in 'tool_call': "),
    ({"env": "workplace"}, "manifest.json says env 'workplace' but train.parquet holds 'tool_call' rows: "),
])
def test_an_edited_manifest_never_decides_where_ingest_writes(tmp_path, prefect_api, fields, message) -> None:
    version = _dataset(tmp_path / "a" / "b" / "ds")  # '../../ESCAPED' once landed in tmp_path/a/ESCAPED
    if fields.get("name") == "/ABSOLUTE":
        fields = {"name": str(tmp_path / "ABSOLUTE")}
        message = message.replace("/ABSOLUTE", str(tmp_path / "ABSOLUTE"))
    _edit_manifest(version, **fields)
    src = _write(tmp_path / "t.jsonl", *FAILURES)
    before = _tree(tmp_path)
    code, output = _invoke("ingest", "--trajectories", str(src), "--dataset", str(version))
    assert code == 1 and message in _one_error(output), output
    assert _tree(tmp_path) == before  # nothing published, nothing recorded, anywhere


def test_a_record_in_the_way_fails_in_one_line_before_anything_is_published(tmp_path, prefect_api) -> None:
    first, second = _dataset(tmp_path / "one"), _dataset(tmp_path / "two")
    src = _write(tmp_path / "t.jsonl", *FAILURES)
    new = Path(ingest_trajectories(IngestConfig(trajectories=str(src), dataset=str(first)))["version_dir"])
    (second.parent / f"ingest-{new.name}").write_text("in the way")  # where the record of the new version once went
    record = record_dir(IngestConfig(trajectories=str(src), dataset=str(second)))
    record.write_text("in the way")
    before = _tree(tmp_path / "two")
    code, output = _invoke("ingest", "--trajectories", str(src), "--dataset", str(second))
    assert code == 1 and _one_error(output) == (f"error: {record} is a file where this ingest's record folder goes; "
                                                "move it away")
    assert _tree(tmp_path / "two") == before  # the new version was not published


def test_no_ingest_overwrites_another_ingests_record(tmp_path, prefect_api) -> None:
    version = _dataset(tmp_path)
    first = ingest_trajectories(IngestConfig(trajectories=str(_write(tmp_path / "a.jsonl", *FAILURES)),
                                             dataset=str(version)))
    assert first["added"] == 2
    record = Path(first["report"]).parent
    kept = _tree(record)
    later = ingest_trajectories(IngestConfig(trajectories=str(_write(tmp_path / "b.jsonl", *PASSES)),
                                             dataset=first["version_dir"]))  # the version the first one created
    assert later["added"] == 0 and later["version_dir"] == first["version_dir"]
    assert Path(later["report"]).parent != record and Path(later["report"]).is_file()
    assert _tree(record) == kept
    assert pl.read_parquet(later["trajectories"])["trajectory"].to_list() == ["osprey"]


def _deep(levels: int) -> str:
    return '{"project_id": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize("levels", [300, 100_000])  # pydantic's serialization depth; json's recursion
@pytest.mark.parametrize("where", ["agent", "fix"])
def test_deeply_nested_arguments_are_a_bucketed_row(tmp_path, where, levels) -> None:
    src = _write(tmp_path / "t.jsonl", _traj("deep", "PRJ-447", **{where: _deep(levels)}), *PASSES)
    rows = [rescore(t, load_tools(env_paths("tool_call")[1]), "tool_call") for t in read_trajectories(src)]
    assert rows[0]["bucket"] == "no_reference" and rows[0]["task"] is None
    assert rows[0]["detail"] == "unreadable call: arguments nested deeper than 64 levels"
    assert rows[1]["bucket"] == "passed"


def test_a_deeply_nested_workplace_correction_is_a_bucketed_row() -> None:
    line = {"id": "wp", "env": "workplace", "state": {}, "outcome": {"success": False},
            "messages": [{"role": "user", "content": "move the design sync"},
                         {"role": "assistant", "tool_calls": [_call("{}")]}],
            "interventions": [{"message_index": 1, "kind": "correction", "tool_calls": [_call(_deep(900))]}]}
    row = rescore(Trajectory.model_validate(line), load_tools(env_paths("workplace")[1]), "workplace")
    assert row["bucket"] == "no_reference" and "nested deeper than 64 levels" in row["detail"]


def test_an_oversized_line_is_refused_by_number_without_being_read_whole(tmp_path) -> None:
    huge = _traj("huge", "PRJ-447") | {"metadata": {"log": "x" * (8 * MAX_LINE_BYTES)}}
    src = _write(tmp_path / "t.jsonl", *PASSES, huge)
    tracemalloc.start()
    try:
        with pytest.raises(IngestError) as caught:
            read_trajectories(src)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (f"{src}:2: the line is longer than 1,048,576 bytes, the most one trajectory may "
                                 "take; trim it (its state, its observations) or leave it out")
    assert peak < 4 * MAX_LINE_BYTES  # the 8 MiB line was never held whole


def test_a_request_longer_than_a_task_prompt_is_bucketed_too_large(tmp_path) -> None:
    long = _traj("long", "PRJ-447")
    long["messages"][0]["content"] += " Context: " + "lorem ipsum " * 300
    rows = [rescore(t, load_tools(env_paths("tool_call")[1]), "tool_call")
            for t in read_trajectories(_write(tmp_path / "t.jsonl", long, *FAILURES))]
    assert [r["bucket"] for r in rows] == ["too_large", "wrong_args", "wrong_args"]
    assert rows[0]["task"] is None and "at most 2,000" in rows[0]["detail"]


GOOD = json.dumps(_traj("good", "PRJ-447"))


@pytest.mark.parametrize(("line", "message"), [
    (GOOD[:-1] + ', "metadata": {"x": NaN}}', "not JSON: unexpected character, expected a JSON value: column "),
    (GOOD[:-1] + ', "metadata": {"x": -Infinity}}', "NaN and Infinity are not JSON: write null or a string"),
    (GOOD[:-1] + ', "metadata": {"x": 1e400}}', "not JSON: number is infinity when parsed as double: column "),
    (GOOD[:-1] + ', "id": "other"}', 'not JSON: duplicate key "id" in one object; keep one of them'),
    (GOOD.replace('"success": false', '"success": "yes"'), "outcome.success: Input should be a valid boolean"),
    (GOOD.replace('"message_index": 1', '"message_index": 1.0'), "interventions.0.message_index: Input should be"),
    (json.dumps(_traj("wp", "PRJ-447", env="workplace", state={"events": {"E1": {"id": "E1", "zz": "NAN"}}})
                ).replace('"NAN"', "NaN"), "NaN and Infinity are not JSON"),  # it became null in the task's state
])
def test_lines_are_strict_json_as_score_reads_them(tmp_path, line: str, message: str) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(PASSES[0]) + "\n" + line + "\n")
    with pytest.raises(IngestError) as caught:
        read_trajectories(src)
    assert str(caught.value).startswith(f"{src}:2: ") and message in str(caught.value), caught.value


def _rollouts(catalog, path: Path, completions: list[str]) -> Path:
    tools, seeds = catalog
    task = seed_task(seeds[0], tools).model_dump(mode="json")
    path.write_bytes(b"".join(orjson.dumps({"task": task, "completion": c}) + b"\n" for c in completions))
    return path


def test_profile_reward_never_prints_model_output_as_escape_sequences(tmp_path, catalog) -> None:
    hostile = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mred \x9b31m \u202eevil | `x`"
    src = _rollouts(catalog, tmp_path / "r.jsonl", [hostile])
    code, output = _invoke("profile-reward", "--verifier", "tool_call", "--input", str(src), "--report",
                           str(tmp_path / "r.md"))
    report = (tmp_path / "r.md").read_text()
    assert code == 0 and "1 rollouts" in output
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in output and raw not in report
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in report and "\\u202eevil" in report


def test_no_command_overwrites_its_own_input(tmp_path, catalog) -> None:
    src = _rollouts(catalog, tmp_path / "r.jsonl", ['{"tool": "x", "args": {}}'])
    before = src.read_bytes()
    os.link(src, tmp_path / "hard.jsonl")
    (tmp_path / "soft.jsonl").symlink_to(src)
    for target in (src, tmp_path / "hard.jsonl", tmp_path / "soft.jsonl"):
        message = f"is the same file as --input {src}: writing it would overwrite the input; choose another "
        for args, option in ((["profile-reward", "--verifier", "tool_call", "--report"], "--report"),
                             (["score", "--verifier", "tool_call", "--output"], "--output"),
                             (["dedupe", "--field", "completion", "--output"], "--output")):
            code, output = _invoke(*args, str(target), "--input", str(src))
            assert code == 1 and _one_error(output) == f"error: {option} {target} {message}{option}", output
    assert src.read_bytes() == before


def test_profile_reward_refuses_negative_samples_and_an_empty_input(tmp_path, catalog) -> None:
    src = _rollouts(catalog, tmp_path / "r.jsonl", ['{"tool": "x", "args": {}}'])
    code, output = _invoke("profile-reward", "--verifier", "tool_call", "--input", str(src), "--samples", "-1")
    assert code == 1 and _one_error(output) == ("error: flywheel profile-reward: Invalid value for '--samples': Input "
                                                "should be greater than or equal to 0 (see flywheel profile-reward "
                                                "--help)")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    code, output = _invoke("profile-reward", "--verifier", "tool_call", "--input", str(empty))
    assert code == 1 and _one_error(output) == (f"error: --input {empty} has no lines (empty or blank): nothing to "
                                                "process; name the JSONL file with the rows")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl", "r.jsonl"]  # no report written
