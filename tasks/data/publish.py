"""Stage 7: publish a dataset version atomically, and read one back checked.

``DIR/<name>/<version>/`` appears whole or not at all: files are written to a temporary sibling folder, fsynced,
then renamed into place. The version is ``v-`` plus the first 12 hex digits of the content hash (sha256 over the
train and held-out files' hashes), so the same data always lands in the same version and republishing it is a
no-op. Parquet is written with polars. The manifest records every data file's sha256; readers go through
:func:`read_split`, which checks the file against the manifest first, and commands that read a version (eval,
train, generate --parent, ingest) run :func:`check_version` before their flow: nothing is evaluated, trained or
reported under a version and content hash that no longer describe it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from flywheel.schemas import DatasetManifest
from flywheel.schemas.records import folder_name
from flywheel.tasks.files import read_regular, share_tree

DATA_FILES = ("train.parquet", "heldout.parquet")
MAX_MANIFEST_BYTES = 16 << 20  # a manifest is a few KB; bounds what an edited or swapped one costs to refuse
ROW_COLUMNS = ("id", "env", "task", "prompt")  # what check_version reads of each row: all text, never null


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_hash(file_hashes: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{n}:{file_hashes[n]}\n" for n in DATA_FILES).encode()).hexdigest()


def _write_parquet(df: pl.DataFrame, path: Path) -> None:
    df.write_parquet(path, compression="zstd", statistics=False)
    with path.open("rb") as f:
        os.fsync(f.fileno())


def _abandoned(folder: Path) -> bool:
    """A temp folder no live publisher holds: each publisher keeps an flock on its own until it is done."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _locked_temp(root: Path) -> tuple[Path, int]:
    """A new temp folder in ``root`` and the fd that holds its flock, after sweeping killed runs' leftovers.

    All under an flock on ``root`` itself (no lock file to list beside the versions): a sweep never sees another
    publisher's folder in the moment between its creation and its flock, when it would look abandoned."""
    guard = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        for stale in root.glob(".tmp-*"):  # leftovers of a killed run, not a publisher running beside this one
            if _abandoned(stale):
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        lock = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock, fcntl.LOCK_EX)  # the kernel drops it if this process dies: then the folder is a leftover
        return tmp, lock
    finally:
        os.close(guard)


def publish(out_dir: Path, name: str, frames: dict[str, pl.DataFrame], manifest_fields: dict[str, Any],
            extra_json: dict[str, Any] | None = None) -> Path:
    """Write frames (train, heldout, rejected) plus manifest.json; return the version folder, ``out_dir/name/v-...``
    (``name`` one folder name: never a path that leaves ``out_dir``).

    Two publishers at once: neither removes the other's temp folder (each holds an flock on its own from its creation:
    creating and locking it, and sweeping the leftovers of killed runs, happen under an flock on ``DIR/<name>``
    itself), and the second finds the version published. A version folder that already exists when the same content
    is published again is used only if it is that version as published (a real folder whose files verify)."""
    root = out_dir / folder_name(name)
    root.mkdir(parents=True, exist_ok=True)
    tmp, lock = _locked_temp(root)
    share_tree(tmp)  # mkdtemp makes it private; a published version gets the umask's modes like any new folder
    try:
        hashes = {}
        for split, df in frames.items():
            _write_parquet(df, tmp / f"{split}.parquet")
            hashes[f"{split}.parquet"] = file_sha256(tmp / f"{split}.parquet")
        digest = content_hash(hashes)
        version = f"v-{digest[:12]}"
        manifest = DatasetManifest(name=name, version=version, content_hash=digest, files=hashes, **manifest_fields)
        for fname, payload in {"manifest.json": manifest.model_dump(mode="json"), **(extra_json or {})}.items():
            (tmp / fname).write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n",
                                     encoding="utf-8")
        target = root / version
        try:
            os.rename(tmp, target)  # refuses a non-empty target: a published version is never replaced
        except OSError:
            if not os.path.lexists(target):
                raise
            shutil.rmtree(tmp)  # same content hash: this exact version is already published, or something else is
            _check_existing(target, manifest)
        return target
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(lock)


def _check_existing(target: Path, manifest: DatasetManifest) -> None:
    """``target``, found in place of the version ``manifest`` describes, must be that version as published: a real
    folder (not a link to another dataset) whose manifest names the same dataset, version, env and content and whose
    files match it. Anything else is one ValueError: publish never hands back a folder it did not make."""
    why = ""
    if target.is_symlink() or not target.is_dir():
        why = "it is a link or a file, not the folder publish made"
    else:
        try:
            found = read_manifest(target)
            for name in sorted(set(found.files) | set(manifest.files)):
                verified_file(target, name, found)
            mine = (manifest.name, manifest.version, manifest.env, manifest.content_hash)
            if (found.name, found.version, found.env, found.content_hash) != mine:
                why = (f"its manifest describes {found.env} dataset {found.name!r} {found.version} "
                       f"(content {found.content_hash[:12]}), not this one")
        except (ValueError, OSError) as exc:
            why = " ".join(str(exc).split())
    if why:
        raise ValueError(f"{target} already exists but is not the version this run made ({why}): move it away and "
                         "rerun")


def check_version_links(root: Path) -> None:
    """Before a run that publishes into ``root`` (``OUT/NAME``): every ``v-*`` there is a real folder, so no link can
    stand in for the version the run makes (publish also checks the folder it lands on, files included)."""
    for entry in sorted(root.glob("v-*")) if root.is_dir() else ():
        if entry.is_symlink() or not entry.is_dir():
            raise ValueError(f"{entry} is a link or a file, not a published version folder: publish would hand it "
                             "back as this run's version; move it away")


def read_manifest(version_dir: Path) -> DatasetManifest:
    path = version_dir / "manifest.json"
    if not path.is_file():
        raise ValueError(f"{version_dir} is not a published dataset version (no manifest.json)")
    try:
        data = read_regular(path, MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise ValueError(f"{path} cannot be read ({exc.strerror or exc}); republish the version with "
                         "`flywheel generate`") from None
    except ValueError as exc:  # "larger than N KB"
        raise ValueError(f"{path} is {exc}: not a dataset manifest (a few KB); republish the version with "
                         "`flywheel generate`") from None
    try:
        return DatasetManifest.model_validate_json(data.decode("utf-8"))
    except UnicodeDecodeError:  # else a ValueError about a codec and a byte position, naming no file
        raise ValueError(f"{path} is not UTF-8 text; republish the version with `flywheel generate`") from None
    except ValidationError as err:
        e = err.errors()[0]
        raise ValueError(f"{path} is not a dataset manifest ({'.'.join(map(str, e['loc'])) or 'record'}: "
                         f"{e['msg'].removeprefix('Value error, ')}); "
                         "republish the version with `flywheel generate`") from None


def verified_file(version_dir: Path, name: str, manifest: DatasetManifest | None = None) -> Path:
    """``version_dir/name`` once its sha256 matches the manifest's; otherwise one error that says to regenerate."""
    manifest = manifest or read_manifest(version_dir)
    path = version_dir / name
    if set(DATA_FILES) <= set(manifest.files) and content_hash(manifest.files) != manifest.content_hash:
        raise ValueError(f"{version_dir / 'manifest.json'}: content_hash does not match the files' sha256: the "
                         "manifest was edited after publishing; regenerate the dataset")
    if name not in manifest.files:
        raise ValueError(f"{version_dir / 'manifest.json'} records no sha256 for {name}: the version is incomplete; "
                         "republish it with `flywheel generate`")
    if not path.is_file():
        raise ValueError(f"{path} is missing: the dataset version is incomplete; republish it")
    actual = file_sha256(path)
    if actual != manifest.files[name]:
        raise ValueError(f"{path} does not match manifest.json (sha256 {actual[:12]}, recorded "
                         f"{manifest.files[name][:12]}): the dataset was changed after publishing; regenerate it")
    return path


def read_split(version_dir: Path, split: str, columns: list[str] | None = None,
               manifest: DatasetManifest | None = None) -> pl.DataFrame:
    """A published split, checked against the manifest before use: a file changed after publishing, or not parquet,
    is one ValueError naming the file."""
    path = verified_file(version_dir, f"{split}.parquet", manifest)
    try:
        return pl.read_parquet(path, columns=columns)
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path} is not a readable parquet file ({first}); regenerate the dataset") from None


def _first(mask: pl.Series) -> int:
    """The 1-based row number of the first True in ``mask`` (the caller knows there is one)."""
    return int(mask.arg_max() or 0) + 1


def check_version(version_dir: Path, splits: tuple[str, ...] = ("train", "heldout"),
                  limit: int | None = None) -> DatasetManifest:
    """The one check every command that reads a published version runs before its flow (eval, train, generate
    --parent, ingest); returns the manifest. Each error is one ValueError naming the file (and row):

    - the splits' files match the manifest and read as parquet (:func:`read_split`);
    - the manifest (not hashed) says what the folder is: ``name`` the folder the version lies in, ``version`` its own
      folder's name and ``v-`` + its content hash, ``env`` a known env;
    - every row: ``id``, ``env``, ``task`` and ``prompt`` are text, never null; ``env`` the manifest's; ids unique
      across the splits; the prompt at most ``MAX_TEXT_CHARS`` (what dedupe takes); the task JSON parses as a Task
      of that env whose id (its content hash) is the row's ``id``. The JSON of the first ``limit`` rows by id only,
      with ``limit`` (what ``flywheel eval --limit`` reads); each parsed once, none kept.
    """
    from flywheel.schemas import Task
    from flywheel.tasks.data.dedupe import MAX_TEXT_CHARS
    from flywheel.verifiers.envs import env_names

    version_dir = Path(version_dir)
    manifest = read_manifest(version_dir)
    frames = {split: read_split(version_dir, split, None, manifest) for split in splits}  # files first
    where, real, redo = version_dir / "manifest.json", version_dir.resolve(), "regenerate the dataset"
    if manifest.name != real.parent.name:
        raise ValueError(f"{where} names the dataset {manifest.name!r} but the version lies in {real.parent.name!r}: "
                         "the manifest was edited (or the version moved); pass a version as `flywheel generate` "
                         "published it, OUT/NAME/VERSION")
    if manifest.version != real.name or real.name != f"v-{manifest.content_hash[:12]}":
        raise ValueError(f"{where} names the version {manifest.version!r} but its folder is {real.name!r} (and its "
                         f"content v-{manifest.content_hash[:12]}): the manifest was edited (or the folder renamed); "
                         "pass a version as `flywheel generate` published it")
    if manifest.env not in env_names():
        raise ValueError(f"{where} says env {manifest.env!r}, which is not an env ({', '.join(env_names())}): the "
                         f"manifest was edited; {redo}")
    seen: dict[str, str] = {}
    for split, frame in frames.items():
        path = version_dir / f"{split}.parquet"
        for col in ROW_COLUMNS:
            if col not in frame.columns:
                raise ValueError(f"{path} has no {col!r} column: the rows were edited; {redo}")
            if frame[col].dtype != pl.String:
                raise ValueError(f"{path}: column {col!r} holds {frame[col].dtype}, not text: the rows were edited; "
                                 f"{redo}")
            if frame[col].null_count():
                raise ValueError(f"{path} row {_first(frame[col].is_null())}: {col} is null: the rows were edited; "
                                 f"{redo}")
        other = frame["env"] != manifest.env
        if other.any():
            envs = ", ".join(map(repr, sorted(set(frame.filter(other)["env"]))))
            raise ValueError(f"{version_dir}: manifest.json says env {manifest.env!r} but {split}.parquet holds "
                             f"{envs} rows: the manifest or the rows were edited (the first at row {_first(other)}); "
                             f"{redo}")
        long = frame["prompt"].str.len_chars() > MAX_TEXT_CHARS
        if long.any():
            raise ValueError(f"{path} row {_first(long)}: the prompt is longer than {MAX_TEXT_CHARS:,} characters: "
                             f"the rows were edited; {redo}")
        for row, task_id in enumerate(frame["id"], 1):
            if task_id in seen:
                raise ValueError(f"{path} row {row}: task id {task_id[:12]}... is there twice (also in "
                                 f"{seen[task_id]}): the rows were edited; {redo}")
            seen[task_id] = f"{split}.parquet row {row}"
        rows = frame.select("id", "task").with_row_index("row", 1)
        if limit is not None:
            rows = rows.sort("id").head(limit)
        for row, task_id, text in rows.iter_rows():
            try:
                task = Task.model_validate_json(text)
            except ValidationError as err:
                e = err.errors()[0]
                raise ValueError(f"{path} row {row}: the task is not a valid Task "
                                 f"({'.'.join(map(str, e['loc'])) or 'record'}: "
                                 f"{' '.join(e['msg'].removeprefix('Value error, ').split())[:200]}): "
                                 f"the rows were edited; {redo}") from None
            if task.id != task_id or task.env != manifest.env:
                what = f"its task's id is {task.id[:12]}..." if task.id != task_id else f"its task is {task.env!r}"
                raise ValueError(f"{path} row {row}: id {task_id[:12]}... but {what}: the rows were edited; {redo}")
    return manifest
