"""Stage 7: publish a dataset version atomically.

Contract: ``DIR/<name>/<version>/`` appears whole or not at all: files are
written to a temporary sibling folder, fsynced, then renamed into place. The
version is ``v-`` plus the first 12 hex digits of the content hash (sha256 over
the train and held-out files' hashes), so the same data always lands in the
same version and republishing it is a no-op. Parquet is written with polars.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from schemas import DatasetManifest

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


def publish(out_dir: Path, name: str, frames: dict[str, pl.DataFrame], manifest_fields: dict[str, Any],
            extra_json: dict[str, Any] | None = None) -> Path:
    """Write frames (train, heldout, rejected) plus manifest.json; return the version folder."""
    root = out_dir / name
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # leftovers of a killed run: never a published version
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    tmp.chmod(0o755)  # mkdtemp makes it private; a published version is readable like any folder
    try:
        hashes = {}
        for split, df in frames.items():
            _write_parquet(df, tmp / f"{split}.parquet")
            hashes[f"{split}.parquet"] = file_sha256(tmp / f"{split}.parquet")
        digest = content_hash(hashes)
        version = f"v-{digest[:12]}"
        manifest = DatasetManifest(name=name, version=version, content_hash=digest, files=hashes, **manifest_fields)
        for fname, payload in {"manifest.json": manifest.model_dump(mode="json"), **(extra_json or {})}.items():
            (tmp / fname).write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        target = root / version
        if target.exists():
            shutil.rmtree(tmp)  # same content hash: this exact version is already published
        else:
            os.replace(tmp, target)
        return target
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_manifest(version_dir: Path) -> DatasetManifest:
    path = version_dir / "manifest.json"
    if not path.is_file():
        raise ValueError(f"{version_dir} is not a published dataset version (no manifest.json)")
    try:
        return DatasetManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as err:
        e = err.errors()[0]
        raise ValueError(f"{path} is not a dataset manifest ({'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}); "
                         "republish the version with `flywheel generate`") from None
