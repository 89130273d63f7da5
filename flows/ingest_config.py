"""``flywheel ingest``'s parameters (IngestConfig) and where an ingest's record goes (record_dir).

Apart from the flow (flows/ingest.py, which imports Prefect and polars) so that the CLI can build its options from
the model's fields without loading either; the validator imports the dataset checks when it runs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class IngestConfig(BaseModel):
    """Checked up front: the dataset is intact and of an env ingest supports, its manifest names the folder it lies in
    and the env its rows hold, and the new version and the record can be written there, so an expected error is one
    line before the flow starts (not a flow run's traceback, not after publishing). ``flywheel ingest`` also parses
    the trajectories first."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    trajectories: str = Field(min_length=1, description="JSONL of production trajectories (OpenAI chat format).")
    dataset: str = Field(min_length=1, description="Published dataset version to extend with the regression tasks "
                         "(OUT/NAME/VERSION).")
    threshold: float = Field(default=0.8, gt=0.0, le=1.0, description="MinHash Jaccard at which a new task is a near "
                             "duplicate.")

    @model_validator(mode="after")
    def _check(self) -> IngestConfig:
        from flywheel.tasks.data.ingest import SUPPORTED_ENVS
        from flywheel.tasks.data.publish import check_version, verified_file

        src = Path(self.dataset)
        if not (src / "manifest.json").is_file():
            raise ValueError(f"--dataset {src} is not a published version folder (no manifest.json); pass "
                             "OUT/NAME/VERSION as printed by `flywheel generate`")
        manifest = check_version(src)  # files, the manifest against its folder (a manifest is not hashed: an edited
        folder = src.resolve().parent  # name would publish elsewhere), every row against the manifest's env
        if manifest.env not in SUPPORTED_ENVS:
            raise ValueError(f"--dataset {src} is a {manifest.env} dataset; "
                             f"ingest supports {', '.join(SUPPORTED_ENVS)}")
        verified_file(src, "rejected.parquet", manifest)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ValueError(f"--dataset {src}: cannot create files in {folder}, where the new version and the "
                             "ingest record go (permission denied or read-only); copy the dataset somewhere writable")
        if Path(self.trajectories).is_file():  # a missing file is read_trajectories' one-line error
            record = record_dir(self)
            if record.exists() and not record.is_dir():
                raise ValueError(f"{record} is a file where this ingest's record folder goes; move it away")
            for name in ("trajectories.parquet", "report.md"):
                if (record / name).is_dir():
                    raise ValueError(f"{record / name} is a folder where this ingest's record goes; move it away")
        return self


def record_dir(config: IngestConfig) -> Path:
    """Where an ingest's record goes: beside the versions, named after its inputs (the input version, the
    trajectories file's bytes and the threshold), so no other ingest writes there."""
    src = Path(config.dataset).resolve()
    h = hashlib.sha256(f"{config.threshold!r}\n".encode())
    with Path(config.trajectories).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return src.parent / f"ingest-{src.name}-{h.hexdigest()[:12]}"
