"""Stage 7: publish a dataset version atomically.

Contract: ``DIR/<name>/<version>/`` appears whole or not at all: files are
written to a temporary sibling folder, fsynced, then renamed into place. Two
publishers at once: neither removes the other's temp folder (each holds an
flock on its own from its creation: creating and locking it, and sweeping the
leftovers of killed runs, happen under an flock on ``DIR/<name>`` itself), and
the second finds the version published. The version is
``v-`` plus the first 12 hex digits of the content hash (sha256 over the train
and held-out files' hashes), so the same data always lands in the same version
and republishing it is a no-op. Parquet is written with polars.

The manifest records every data file's sha256 (``files``). Readers go through
:func:`read_split`, which checks the file against the manifest before using
it: a file changed after publishing, or not parquet, is one ValueError naming
the file, so nothing is evaluated, trained or reported under a version and
content hash that no longer describe it.
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
from flywheel.tasks.files import share_tree

DATA_FILES = ("train.parquet", "heldout.parquet")


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
    (``name`` one folder name: never a path that leaves ``out_dir``)."""
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
            if not target.is_dir():
                raise
            shutil.rmtree(tmp)  # same content hash: this exact version is already published
        return target
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(lock)


def read_manifest(version_dir: Path) -> DatasetManifest:
    path = version_dir / "manifest.json"
    if not path.is_file():
        raise ValueError(f"{version_dir} is not a published dataset version (no manifest.json)")
    try:
        return DatasetManifest.model_validate_json(path.read_text(encoding="utf-8"))
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
    """A published split, checked against the manifest before use; a corrupted file is one clear error."""
    path = verified_file(version_dir, f"{split}.parquet", manifest)
    try:
        return pl.read_parquet(path, columns=columns)
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path} is not a readable parquet file ({first}); regenerate the dataset") from None
