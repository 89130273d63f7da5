"""A versioned model registry on a folder: immutable versions, an append-only audit log, derived aliases.

Layout: ``ROOT/versions/<id>/`` (adapter/, report.json, version.json; never rewritten) and
``ROOT/events/<seq>.json`` (one file per change). Writes are atomic and nothing is overwritten: a version folder
is renamed into place whole, and an event file is hard-linked into place only if its number is still free, so
a killed command leaves the registry as it was and two writers cannot take the same number. Every change reads
the log, decides and appends while holding an exclusive lock (``flock`` on ``ROOT/.lock``), so each event is
computed from the state right before it: two promotions at once record each other as ``previous``, two rollbacks
pop two promotions. Aliases are read by replaying the events: ``candidate`` moves on every register,
``production`` only on promote and rollback. A damaged event file (not JSON, wrong fields, a number that does
not match its name) is a RegistryError naming the file, never a guess.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flywheel.schemas import sha256_text
from flywheel.schemas.registry import Event, ModelVersion
from flywheel.tasks.data.publish import file_sha256
from flywheel.tasks.files import share_tree


class RegistryError(ValueError):
    """The registry refuses the change; the message says why and what to do."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def folder_hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _read_event(path: Path) -> Event:
    """One event file, checked: a damaged audit log is reported, never replayed with a guess."""
    fix = "the audit log is damaged; restore this file from a backup (events are append-only, never edit them)"
    try:
        event = Event.model_validate_json(path.read_bytes())
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(map(str, e["loc"])) or "record"
        raise RegistryError(f"{path} is not a registry event ({where}: {e['msg']}): {fix}") from None
    except OSError as err:
        raise RegistryError(f"{path} cannot be read ({err.strerror or err}): {fix}") from None
    if f"{event.seq:06d}.json" != path.name:
        raise RegistryError(f"{path} holds event {event.seq}, not the one its name says: {fix}")
    return event


class Registry:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def events(self) -> list[Event]:
        folder = self.root / "events"
        files = sorted(folder.glob("[0-9]*.json")) if folder.is_dir() else []
        return [_read_event(p) for p in files]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive over read-decide-append: the lock file lives in the registry root, the kernel drops it if
        the holder dies, so a killed command never leaves the registry locked."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _append(self, **fields: Any) -> Event:
        """Append one event; the caller holds the lock (the hard link still refuses a taken number)."""
        folder = self.root / "events"
        folder.mkdir(parents=True, exist_ok=True)
        events = self.events()
        event = Event(seq=events[-1].seq + 1 if events else 1, at=_now(), actor=getpass.getuser(), **fields)
        fd, tmp = tempfile.mkstemp(prefix=".event-", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(event.model_dump_json(indent=2) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, folder / f"{event.seq:06d}.json")  # fails if the number exists: never overwrites
        except FileExistsError:
            raise RegistryError(f"event {event.seq} in {folder} was written by a writer that did not take "
                                f"{self.root / '.lock'}; run the command again") from None
        finally:
            os.unlink(tmp)
        return event

    def aliases(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for e in self.events():
            if e.alias:
                out[e.alias] = e.version
        return out

    def version(self, ref: str) -> ModelVersion:
        """A version by id or alias."""
        vid = self.aliases().get(ref, ref)
        if vid not in {e.version for e in self.events() if e.action == "register"}:
            known = sorted({e.version for e in self.events()} | set(self.aliases()))
            raise RegistryError(f"no version or alias {ref!r} in {self.root}; known: {', '.join(known) or '(empty)'}")
        return ModelVersion.model_validate_json((self.root / "versions" / vid / "version.json").read_text())

    def path(self, version: ModelVersion) -> Path:
        return self.root / "versions" / version.id

    def register(self, adapter_dir: Path, fields: dict[str, Any], report: Path | None = None) -> ModelVersion:
        """Copy an adapter (and its eval report and rollouts) in as a new immutable version; it becomes the
        candidate."""
        if not (adapter_dir / "adapter_config.json").is_file():
            raise RegistryError(f"{adapter_dir} is not a PEFT adapter folder (no adapter_config.json)")
        links = sorted(p for p in adapter_dir.rglob("*") if p.is_symlink())
        if links:  # copied through, a link to a private file would be published readable (and outside the hashes)
            raise RegistryError(f"{adapter_dir} holds a symlink ({links[0].relative_to(adapter_dir)}): a version is "
                                "copied from regular files only; copy the adapter without links and register that")
        hashes = folder_hashes(adapter_dir)
        digest = sha256_text(json.dumps(hashes, sort_keys=True))
        vid = f"mv-{digest[:12]}"
        target = self.root / "versions" / vid
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
            try:
                shutil.copytree(adapter_dir, tmp / "adapter")
                if report is not None:  # with its rollouts: a later candidate is gated against this version
                    shutil.copy2(report, tmp / "report.json")
                    if (report.parent / "rollouts.parquet").is_file():
                        shutil.copy2(report.parent / "rollouts.parquet", tmp / "rollouts.parquet")
                files = {f"adapter/{k}": v for k, v in hashes.items()}
                kept = (tmp / "report.json", tmp / "rollouts.parquet")  # the figures a later gate is judged against
                files |= {f.name: file_sha256(f) for f in kept if f.is_file()}
                version = ModelVersion(id=vid, adapter="adapter", files=files,
                                       files_hash=digest, eval_report="report.json" if report else None,
                                       created_at=_now(), **fields)
                (tmp / "version.json").write_text(version.model_dump_json(indent=2) + "\n", encoding="utf-8")
                share_tree(tmp)  # mkdtemp is 0700 and safetensors files 0600: a version is read like any output
                os.replace(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        version = ModelVersion.model_validate_json((target / "version.json").read_text())
        with self._locked():
            self._append(action="register", version=vid, alias="candidate", previous=self.aliases().get("candidate"))
        return version

    def verify_files(self, version: ModelVersion) -> list[str]:
        """Files whose content no longer matches the recorded hash ([] when intact)."""
        base = self.path(version)
        return [rel for rel, digest in version.files.items()
                if not (base / rel).is_file() or file_sha256(base / rel) != digest]

    def promote(self, ref: str, gate: dict[str, Any] | None, override: str | None = None) -> Event:
        """Move production to a version: only with a passing gate, or an explicit override with its reason."""
        version = self.version(ref)
        if not (gate and gate.get("passed")) and not (override and override.strip()):
            raise RegistryError(f"the gate did not pass for {version.id}: production stays at "
                                f"{self.aliases().get('production', '(none)')}; "
                                "pass --override REASON to promote anyway")
        with self._locked():  # previous is what production is right before this event, not when we started
            return self._append(action="promote", version=version.id, alias="production", gate=gate,
                                previous=self.aliases().get("production"), override=override if override else None)

    def production_stack(self) -> list[str]:
        """Promotions still in force, oldest first: promote pushes, rollback pops."""
        stack: list[str] = []
        for e in self.events():
            if e.action == "promote":
                stack.append(e.version)
            elif e.action == "rollback" and stack:
                stack.pop()
        return stack

    def rollback(self) -> Event:
        """Production back to the version it pointed to before the current promotion."""
        with self._locked():
            stack = self.production_stack()
            if len(stack) < 2:
                raise RegistryError(f"nothing to roll back to: production is {stack[-1] if stack else '(unset)'} "
                                    "and had no earlier version")
            return self._append(action="rollback", version=stack[-2], alias="production", previous=stack[-1])
