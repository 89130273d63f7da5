"""A crafted published version: rows edited and republished with hashes that match (as `publish` computes them), an
edited manifest (not hashed), a version folder swapped or damaged where `generate` lands. Every command that reads a
version (eval, train, generate --parent, ingest) runs `check_version` before its flow: one line naming the file (and
row), never a flow's traceback, never a silent use. Small versions built in process (6 seed tasks), no model.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from flywheel.flows.cli import app
from flywheel.flows.config import EvalConfig, GenerateConfig
from flywheel.flows.eval import split_file
from flywheel.tasks.data.dedupe import MAX_TEXT_CHARS
from flywheel.tasks.data.publish import publish, read_manifest
from flywheel.tasks.training.train import TrainConfig

runner = CliRunner()
Rows = Callable[[str, pl.DataFrame], pl.DataFrame]


def _one_error(args: list[str]) -> str:
    result = runner.invoke(app, args, prog_name="flywheel")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and "Traceback" not in result.output and len(lines) == 1, result.output
    assert lines[0].startswith("error: "), result.output
    return lines[0]


def _version(out: Path, env: str = "tool_call", rows: Rows | None = None, name: str | None = None) -> Path:
    """A published version of 6 seed tasks of ``env`` (4 train, 2 held-out), ``rows`` applied to each split before
    publishing: the files match the manifest whatever ``rows`` did."""
    from flywheel.flows.runtime import REJECT_SCHEMA
    from flywheel.tasks.data.generate import task_row
    from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools, seed_task

    tools = load_tools(env_paths(env)[1])
    made = [task_row(seed_task(s, tools), k) | {"cluster_id": s.id, "group_id": s.id}
            for k, s in enumerate(load_seeds(env_paths(env)[0], tools)[:6])]
    frames = {"train": pl.DataFrame([r | {"split": "train"} for r in made[:4]]),
              "heldout": pl.DataFrame([r | {"split": "heldout"} for r in made[4:]])}
    if rows:
        frames = {split: rows(split, frame) for split, frame in frames.items()}
    fields = {"env": env, "counts": {"train": 4, "heldout": 2}, "stage_counts": {}, "reject_reasons": {},
              "params": {}, "run_seed": 0, "code_version": "test", "seeds_hash": "test",
              "created_at": "2025-01-01T00:00:00Z"}
    return publish(out, name or env, frames | {"rejected": pl.DataFrame([], schema=REJECT_SCHEMA)}, fields)


def _edit_manifest(folder: Path, **fields) -> Path:
    manifest = json.loads((folder / "manifest.json").read_text()) | fields
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _message(exc: ValueError) -> str:
    """The one line a command prints for ``exc`` (a config's ValidationError: its validator's message)."""
    text = exc.errors()[0]["msg"].removeprefix("Value error, ") if isinstance(exc, ValidationError) else str(exc)
    assert "\n" not in text, text
    return text


def _train(version: Path, tmp_path: Path) -> str:
    with pytest.raises(ValueError) as err:
        TrainConfig(dataset=str(version), out=str(tmp_path / "t"), method="sft")
    return _message(err.value)


def _eval(version: Path, tmp_path: Path) -> str:
    with pytest.raises(ValueError) as err:
        split_file(EvalConfig(dataset=str(version), out=str(tmp_path / "e"), split="train"))
    return _message(err.value)


def _parent(version: Path, tmp_path: Path) -> str:
    with pytest.raises(ValueError) as err:
        GenerateConfig(out=str(tmp_path / "g"), n=5, parents=(str(version),))
    return _message(err.value)


READERS = {"train": _train, "eval": _eval, "parent": _parent}


def _set(col: str, value, split: str = "train", row: int = 0) -> Rows:
    def edit(s: str, frame: pl.DataFrame) -> pl.DataFrame:
        if s != split:
            return frame
        values = frame[col].to_list()
        values[row] = value
        return frame.with_columns(pl.Series(col, values, dtype=frame.schema[col]))
    return edit


def _other_task_json(split: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Row 2's task JSON swapped for row 1's (both parse; row 2's id no longer is its task's)."""
    tasks = frame["task"].to_list()
    return frame.with_columns(pl.Series("task", [tasks[0], tasks[0], *tasks[2:]])) if split == "train" else frame


# the attacks on rows: each republished with matching hashes; (rows, what the one line says)
ROW_ATTACKS = {
    "task JSON that does not parse": (_set("task", "{not json"), "train.parquet row 1: the task is not a valid Task"),
    "task JSON with a forged id": (
        lambda s, f: f.with_columns(pl.col("task").str.replace('"id":"[0-9a-f]{64}"', '"id":"' + "f" * 64 + '"')),
        "train.parquet row 1: the task is not a valid Task (record: task id ffffffffffff... does not match its"),
    "an id column that is not its task's": (_other_task_json, "train.parquet row 2: id "),
    "a duplicate task id": (lambda s, f: pl.concat([f, f.head(1)]) if s == "train" else f,
                            "train.parquet row 5: task id "),
    "a row of another env": (_set("env", "math"), "manifest.json says env 'tool_call' but train.parquet holds "
                                                  "'math' rows"),
    "a null prompt": (_set("prompt", None), "train.parquet row 1: prompt is null"),
    "an integer prompt": (lambda s, f: f.with_columns(pl.lit(7).alias("prompt")),
                          "train.parquet: column 'prompt' holds Int32, not text"),
    "a prompt over dedupe's cap": (_set("prompt", "x" * (MAX_TEXT_CHARS + 1)),
                                   "train.parquet row 1: the prompt is longer than 1,000,000 characters"),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("attack", ROW_ATTACKS)
def test_crafted_rows_are_refused_before_any_flow(tmp_path, attack, reader) -> None:
    """Before: train and generate --parent used these rows (or crashed inside the flow after a full round); eval
    crashed inside the flow naming neither file nor row."""
    rows, message = ROW_ATTACKS[attack]
    version = _version(tmp_path / "ds", rows=rows)
    text = READERS[reader](version, tmp_path)
    assert message in text and str(version) in text, text


def test_a_task_in_both_splits_is_refused(tmp_path) -> None:
    leak = {}

    def rows(split: str, frame: pl.DataFrame) -> pl.DataFrame:
        leak.setdefault("train", frame.head(1))
        return frame if split == "train" else pl.concat([frame, leak["train"].with_columns(pl.lit("heldout")
                                                                                          .alias("split"))])
    version = _version(tmp_path / "ds", rows=rows)
    assert "heldout.parquet row 3: task id " in _train(version, tmp_path)
    assert "is there twice (also in train.parquet row 1)" in _train(version, tmp_path)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("fields", "message"), [
    ({"env": "math"}, "manifest.json says env 'math' but train.parquet holds 'tool_call' rows"),
    ({"env": "nope"}, "manifest.json says env 'nope', which is not an env"),
    ({"version": "../../../etc"}, "manifest.json names the version '../../../etc' but its folder is 'v-"),
    ({"name": "elsewhere"}, "manifest.json names the dataset 'elsewhere' but the version lies in 'tool_call'"),
])
def test_an_edited_manifest_is_refused_before_any_flow(tmp_path, reader, fields, message) -> None:
    """Before: eval, train and generate --parent took the manifest's word (the version '../../../etc' went into
    report.json and lineage; a math manifest over tool_call rows was evaluated as math)."""
    version = _edit_manifest(_version(tmp_path / "ds"), **fields)
    assert message in READERS[reader](version, tmp_path)


def test_a_renamed_version_folder_is_refused(tmp_path) -> None:
    version = _version(tmp_path / "ds")
    moved = version.rename(version.parent / "v-000000000000")
    assert "names the version 'v-" in _eval(moved, tmp_path)


def test_eval_cli_names_file_and_row_in_one_line(tmp_path, prefect_api) -> None:
    """Before: a pydantic traceback inside the baseline-eval flow, naming neither file nor row."""
    version = _version(tmp_path / "ds", rows=_set("task", "{not json", row=2))
    line = _one_error(["eval", "--dataset", str(version), "--split", "train", "--out", str(tmp_path / "e"),
                       "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
    assert line.startswith(f"error: {version / 'train.parquet'} row ") and "the task is not a valid Task" in line
    assert not (tmp_path / "e").exists()


def test_a_parent_of_another_env_is_refused(tmp_path) -> None:
    """Before: a workplace parent was accepted for a tool_call run, silently deduplicating against nothing relevant."""
    other = _version(tmp_path / "ds", env="workplace")
    assert _parent(other, tmp_path) == (f"--parent {other} is a workplace dataset, not tool_call: dedupe against "
                                        "versions of the --env generated (tool_call)")
    GenerateConfig(env="workplace", out=str(tmp_path / "g"), n=5, parents=(str(other),))  # the same env is fine


def test_intact_versions_pass_every_reader(tmp_path) -> None:
    from flywheel.tasks.data.publish import check_version

    version = _version(tmp_path / "ds")
    TrainConfig(dataset=str(version), out=str(tmp_path / "t"), method="sft")
    assert split_file(EvalConfig(dataset=str(version), out=str(tmp_path / "e")))[1] == read_manifest(version)
    GenerateConfig(out=str(tmp_path / "g"), n=5, parents=(str(version),))
    assert check_version(version, ("heldout",), limit=1).version == version.name


def test_train_refuses_a_split_cut_after_publishing(tmp_path) -> None:
    """Before: TrainConfig read only the manifest; the cut file failed inside the flow."""
    version = _version(tmp_path / "ds")
    pl.read_parquet(version / "train.parquet").head(1).write_parquet(version / "train.parquet")
    assert f"{version / 'train.parquet'} does not match manifest.json" in _train(version, tmp_path)


def test_a_huge_manifest_is_refused_without_reading_it(tmp_path) -> None:
    """Before: a 1 GB manifest.json took 12.6 s and 2.2 GB of memory before its error."""
    version = _version(tmp_path / "ds")
    with (version / "manifest.json").open("r+b") as f:
        f.truncate(1 << 30)  # sparse
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="manifest.json is larger than 16384 KB: not a dataset manifest"):
        read_manifest(version)
    assert time.perf_counter() - t0 < 2.0


def test_a_linked_manifest_is_refused(tmp_path) -> None:
    version = _version(tmp_path / "ds")
    real = tmp_path / "elsewhere.json"
    os.replace(version / "manifest.json", real)
    (version / "manifest.json").symlink_to(real)
    with pytest.raises(ValueError, match="manifest.json cannot be read .a symlink, not a regular file"):
        read_manifest(version)


def test_publish_never_hands_back_a_damaged_or_foreign_version(tmp_path) -> None:
    """Before: when the version folder existed, publish returned it as is: a cut train.parquet, or a link to another
    env's dataset, came back as the run's new version."""
    first = _version(tmp_path / "a")
    assert _version(tmp_path / "a") == first  # the same content again: the version as published, accepted
    pl.read_parquet(first / "train.parquet").head(1).write_parquet(first / "train.parquet")
    with pytest.raises(ValueError) as err:
        _version(tmp_path / "a")
    assert str(err.value).startswith(f"{first} already exists but is not the version this run made ({first}/train"
                                     ".parquet does not match manifest.json")
    other = _version(tmp_path / "m", env="workplace")
    (tmp_path / "b" / "tool_call").mkdir(parents=True)
    (tmp_path / "b" / "tool_call" / first.name).symlink_to(other)
    with pytest.raises(ValueError, match="already exists but is not the version this run made .it is a link"):
        _version(tmp_path / "b")
    (tmp_path / "c" / "tool_call").mkdir(parents=True)
    fake = _version(tmp_path / "c", name="tool_call", rows=lambda s, f: f.head(1))
    fake.rename(tmp_path / "c" / "tool_call" / first.name)  # a real folder, files intact, another content hash
    with pytest.raises(ValueError, match="its manifest describes tool_call dataset 'tool_call' v-"):
        _version(tmp_path / "c")


def test_generate_refuses_a_linked_version_before_any_flow(tmp_path) -> None:
    other = _version(tmp_path / "m", env="workplace")
    (tmp_path / "out" / "tool_call").mkdir(parents=True)
    link = tmp_path / "out" / "tool_call" / "v-0123456789ab"
    link.symlink_to(other)
    assert _one_error(["generate", "--n", "5", "--out", str(tmp_path / "out")]) == (
        f"error: {link} is a link or a file, not a published version folder: publish would hand it back as this "
        "run's version; move it away")
