"""A published dataset changed after publishing: every reader checks its files against manifest.json before use,
so nothing is evaluated, trained or deduplicated against under a version and content hash that no longer describe
it. Always on a copy of the shared `tool_dataset` (the fixture itself is never touched)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from flywheel.flows.config import EvalConfig
from flywheel.flows.eval import load_split
from flywheel.flows.stages import reference_texts
from flywheel.tasks.data.publish import DATA_FILES, content_hash, file_sha256, read_manifest
from flywheel.tasks.data.seeds import SEEDS_DIR
from flywheel.tasks.training.train import TrainConfig, load_tasks

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")
CHANGED = ": the dataset was changed after publishing; regenerate it"


@pytest.fixture
def copy(tool_dataset: str, tmp_path: Path) -> Path:
    version = tmp_path / "ds" / "tool_call" / Path(tool_dataset).name  # as published: OUT/NAME/VERSION
    shutil.copytree(tool_dataset, version)
    return version


def cut_train(version: Path, rows: int = 10) -> tuple[str, str]:
    """Rewrite train.parquet with its first rows only (a valid parquet file); return (recorded, new) sha256."""
    path = version / "train.parquet"
    recorded = file_sha256(path)
    frame = pl.read_parquet(path)
    assert frame.height > rows
    frame.head(rows).write_parquet(path)
    return recorded, file_sha256(path)


def mismatch(version: Path, name: str, recorded: str, actual: str) -> str:
    return f"{version / name} does not match manifest.json (sha256 {actual[:12]}, recorded {recorded[:12]}){CHANGED}"


def flywheel_eval(version: Path, out: Path) -> subprocess.CompletedProcess:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}  # the test harness's API: no server to start
    return subprocess.run([FLYWHEEL, "eval", "--dataset", str(version), "--split", "train", "--out", str(out)],
                          capture_output=True, text=True, timeout=180, env=env)


def test_eval_refuses_a_split_cut_after_publishing(copy, tmp_path) -> None:
    recorded, actual = cut_train(copy)
    proc = flywheel_eval(copy, tmp_path / "eval")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"error: {mismatch(copy, 'train.parquet', recorded, actual)}"]
    assert not (tmp_path / "eval").exists()


def test_garbage_parquet_is_one_line(copy, tmp_path) -> None:
    path = copy / "train.parquet"
    recorded = file_sha256(path)
    path.write_bytes(b"PAR1 this is not parquet PAR1")
    proc = flywheel_eval(copy, tmp_path / "eval")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: {mismatch(copy, 'train.parquet', recorded, file_sha256(path))}"]


def test_garbage_parquet_behind_an_edited_manifest_is_one_line(copy, tmp_path) -> None:
    """Someone "fixed" the manifest to the garbage file's hash: the read itself fails with one clear line."""
    path = copy / "train.parquet"
    path.write_bytes(b"PAR1 this is not parquet PAR1")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["train.parquet"] = file_sha256(path)
    manifest["content_hash"] = content_hash(manifest["files"])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    proc = flywheel_eval(copy, tmp_path / "eval")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {path} is not a readable parquet file (") and \
        lines[0].endswith("); regenerate the dataset")


def test_manifest_edited_to_other_hashes_is_refused(copy) -> None:
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["heldout.parquet"] = hashlib.sha256(b"other").hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError) as err:
        load_split(EvalConfig(dataset=str(copy), out=str(copy.parent / "e"), split="heldout"))
    assert str(err.value) == (f"{copy / 'manifest.json'}: content_hash does not match the files' sha256: the manifest "
                              "was edited after publishing; regenerate the dataset")


def test_training_and_dedupe_against_a_parent_refuse_a_changed_split(copy, tmp_path) -> None:
    recorded, actual = cut_train(copy)
    expected = mismatch(copy, "train.parquet", recorded, actual)
    with pytest.raises(ValueError) as err:  # TrainConfig refuses it now, before any flow (one line: its validator's)
        load_tasks(TrainConfig(dataset=str(copy), out=str(tmp_path / "t")), "train")
    assert err.value.errors()[0]["msg"] == f"Value error, {expected}"
    with pytest.raises(ValueError) as err:
        reference_texts(str(SEEDS_DIR), "tool_call", None, (str(copy),))
    assert str(err.value) == expected


def test_intact_copy_still_reads_and_old_manifests_keep_working(copy, tool_dataset) -> None:
    """The published files are what the manifest (as written since the first release) records."""
    manifest = read_manifest(copy)
    assert set(DATA_FILES) <= set(manifest.files) and content_hash(manifest.files) == manifest.content_hash
    tasks, tools, info = load_split(EvalConfig(dataset=str(copy), out=str(copy.parent / "e"), split="train"))
    assert len(tasks) == manifest.counts["train"] == len(tools) and info["content_hash"] == manifest.content_hash
    assert {p.name: file_sha256(p) for p in Path(tool_dataset).glob("*.parquet")} == manifest.files


def test_publish_beside_a_running_publisher_keeps_its_temp_folder(tmp_path) -> None:
    """Only a killed publisher's leftovers are cleaned up; a live one holds an flock on its temp folder."""
    import fcntl

    from flywheel.tasks.data.publish import publish

    root = tmp_path / "ds"
    live, dead = root / ".tmp-live", root / ".tmp-dead"
    live.mkdir(parents=True)
    dead.mkdir()
    (live / "train.parquet").write_bytes(b"being written")
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what the other publisher holds while it writes
    try:
        frame = pl.DataFrame({"id": ["a", "b"], "prompt": ["x", "y"]})
        fields = dict(env="tool_call", counts={}, stage_counts={}, reject_reasons={}, params={}, run_seed=1,
                      code_version="x", seeds_hash="y", created_at="now")
        version = publish(tmp_path, "ds", {"train": frame, "heldout": frame.head(1), "rejected": frame.head(0)},
                          fields)
    finally:
        os.close(fd)
    assert sorted(p.name for p in root.iterdir()) == [".tmp-live", version.name]
    assert (live / "train.parquet").read_bytes() == b"being written"


FIELDS = dict(env="tool_call", counts={}, stage_counts={}, reject_reasons={}, params={}, run_seed=1, code_version="x",
              seeds_hash="y", created_at="now")


def _frames(tag: str) -> dict[str, pl.DataFrame]:
    frame = pl.DataFrame({"id": [f"{tag}-a", f"{tag}-b"], "prompt": ["x", "y"]})
    return {"train": frame, "heldout": frame.head(1), "rejected": frame.head(0)}


def test_a_new_temp_folder_is_never_swept_before_its_publisher_locks_it(tmp_path) -> None:
    """A publisher creates and locks its temp folder under an flock on the dataset folder: a second publisher
    waits for it instead of taking the fresh, not yet locked folder for a killed run's leftover."""
    import fcntl
    import threading

    from flywheel.tasks.data.publish import publish

    root = tmp_path / "ds"
    fresh = root / ".tmp-fresh"
    fresh.mkdir(parents=True)
    guard = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(guard, fcntl.LOCK_EX)  # the other publisher, right between its mkdtemp and its flock
    done: list[Path] = []
    other = threading.Thread(target=lambda: done.append(publish(tmp_path, "ds", _frames("t"), FIELDS)))
    other.start()
    other.join(1.0)
    assert other.is_alive() and fresh.is_dir()  # it waits; it used to rmtree the fresh folder at once
    lock = os.open(fresh, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.close(guard)
    other.join(30)
    try:
        assert done and sorted(p.name for p in root.iterdir()) == [".tmp-fresh", done[0].name]
    finally:
        os.close(lock)


PUBLISHER = """
import sys, time
from pathlib import Path
import polars as pl
from flywheel.tasks.data.publish import publish
out, tag, rounds, go = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
(out / f"ready-{tag}").touch()
while not go.exists():
    time.sleep(0.005)
fields = dict(env="tool_call", counts={}, stage_counts={}, reject_reasons={}, params={}, run_seed=1, code_version="x",
              seeds_hash="y", created_at="now")
for r in range(rounds):
    frame = pl.DataFrame({"id": [f"{tag}{r}-a", f"{tag}{r}-b"], "prompt": ["x", "y"]})
    print(publish(out, "ds", {"train": frame, "heldout": frame.head(1), "rejected": frame.head(0)}, fields).name)
"""


@pytest.mark.integration
def test_two_publishers_at_once_both_complete(tmp_path) -> None:
    """Two processes publish different versions of one dataset at the same moments, 200 rounds each: every version
    is whole and verifies, neither crashes on the other's sweep, no temp folder is left. (The old code lost a round
    to the race, FileNotFoundError, in each of 4 runs; the test above shows the same deterministically.)"""
    from flywheel.tasks.data.publish import read_split

    rounds, go = 200, tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", PUBLISHER, str(tmp_path), tag, str(rounds), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3])
             for tag in ("p", "q")]
    deadline = 60
    while not all((tmp_path / f"ready-{tag}").exists() for tag in ("p", "q")) and deadline > 0:
        time.sleep(0.05)
        deadline -= 0.05
    go.touch()  # both start publishing together
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    names = [line for out, _ in outputs for line in out.split()]
    assert len(set(names)) == 2 * rounds
    root = tmp_path / "ds"
    assert sorted(p.name for p in root.iterdir()) == sorted(names)  # no .tmp- left
    for name in names:
        assert read_split(root / name, "train").height == 2


def test_outputs_inside_a_published_version_are_refused_before_any_work(copy, tmp_path) -> None:
    """Before: `eval --out VERSION` wrote batches, reports and plots into the published version, and `dedupe
    --output VERSION/train.parquet` overwrote its split (the next reader then refused the whole version)."""
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "a"}\n')
    link = tmp_path / "link"
    link.symlink_to(copy)
    for args in (["eval", "--dataset", str(copy), "--split", "train", "--out", str(copy)],
                 ["eval", "--dataset", str(copy), "--split", "train", "--out", str(link / "report")],
                 ["dedupe", "--input", str(rows), "--output", str(copy / "train.parquet"), "--field", "text"],
                 ["generate", "--n", "5", "--out", str(copy)]):
        proc = subprocess.run([FLYWHEEL, *args], capture_output=True, text=True, timeout=180)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"is inside the published dataset version {copy.resolve()}" in proc.stderr
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before


def test_a_parent_link_moved_to_another_version_is_not_served_from_the_cache(tool_dataset, tmp_path) -> None:
    """Before: the near-dedupe cache was keyed by the --parent string, so a link re-pointed at another version (or
    a version rebuilt under the same path) got the old parent's dedupe result, and the manifest named the link."""
    from flywheel.flows.config import GenerateConfig
    from flywheel.flows.generate import run_generate

    link = tmp_path / "parent"
    link.symlink_to(tool_dataset)
    config = GenerateConfig(out=str(tmp_path / "out"), n=20, seed=5, parents=(str(link),))
    first = run_generate(config)
    assert read_manifest(Path(first["version_dir"])).parents == (str(Path(tool_dataset).resolve()),)
    link.unlink()
    link.symlink_to(first["version_dir"])  # the same path now names a parent holding every row the run makes
    second = run_generate(config)
    reasons = read_manifest(Path(second["version_dir"])).reject_reasons
    assert reasons.get("near_dedupe:near_duplicate_of_reference", 0) >= 20, reasons
    assert read_manifest(Path(second["version_dir"])).parents == (str(Path(first["version_dir"]).resolve()),)
