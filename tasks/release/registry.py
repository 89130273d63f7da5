"""A versioned model registry on a folder: immutable versions, an append-only audit log, derived aliases.

Layout: ``ROOT/versions/<id>/`` (adapter/, report.json, version.json; never rewritten) and
``ROOT/events/<seq>.json`` (one file per change). Writes are atomic and nothing is overwritten: a version folder
is renamed into place whole, and an event file is hard-linked into place only if its number is still free, so
a killed command leaves the registry as it was and two writers cannot take the same number. Every change reads
the log, decides and appends while holding an exclusive lock (``flock`` on ``ROOT/.lock``), so each event is
computed from the state right before it: two promotions at once record each other as ``previous``, two rollbacks
pop two promotions. Aliases are read by replaying the events (registry_log.py, which refuses a damaged log):
``candidate`` moves on every register, ``production`` only on promote and rollback. The lock is never followed
through a symlink, and a lock another process holds for ``LOCK_WAIT_S`` is an error, not a silent hang.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from flywheel.schemas import sha256_text
from flywheel.schemas.registry import Event, ModelVersion
from flywheel.tasks.data.publish import file_sha256
from flywheel.tasks.files import is_registry, share_tree
from flywheel.tasks.release.registry_log import MAX_VERSION_BYTES, RegistryError, read_event, read_record, replayed

LOCK_WAIT_S = 60.0  # a change holds the lock for milliseconds; a minute means a stuck holder


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def folder_hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _actor() -> str:
    """The user name for the audit log, control characters replaced: $LOGNAME cannot forge a line."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", getpass.getuser())


class Registry:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def events(self) -> list[Event]:
        """The audit log in order (by number, not by file name), checked whole; [] for a registry not made yet."""
        folder = self.root / "events"
        if not folder.exists() and not folder.is_symlink():
            return []
        if not folder.is_dir():
            raise RegistryError(f"{folder} is not a folder: {self.root} is not a registry (or is damaged); check "
                                "--registry")
        files = [p for p in folder.glob("[0-9]*.json") if p.stem.isdigit()]
        events = [read_event(p) for p in sorted(files, key=lambda p: int(p.stem))]
        replayed(events, folder)
        return events

    def exists(self) -> bool:
        """Whether a registry was made here, whole or half (``tasks/files.py: is_registry``, the one definition
        outputs are refused by too); events() says if it is damaged."""
        return is_registry(self.root)

    @contextlib.contextmanager
    def _locked(self, create: bool = False) -> Generator[None, None, None]:
        """Exclusive over read-decide-append: the lock file lives in the registry root, the kernel drops it if
        the holder dies, so a killed command never leaves the registry locked. Only ``register`` (``create``)
        makes a registry; the lock is never opened through a symlink, a FIFO or a device."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.exists():
            raise RegistryError(f"no registry at {self.root} (no events or versions folder): check --registry or "
                                "$FLYWHEEL_REGISTRY")
        path = self.root / ".lock"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        except OSError as err:
            why = "a symlink" if err.errno == errno.ELOOP else err.strerror
            raise RegistryError(f"{path} cannot be the registry's lock ({why}): remove it; flywheel makes it "
                                "again") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RegistryError(f"{path} is not a regular file: remove it; flywheel makes it again")
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RegistryError(f"{path} has been held by another process for {LOCK_WAIT_S:g} s "
                                            "(a registry change takes milliseconds): find it with `fuser "
                                            f"{path}`, stop it, and run the command again") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def _append(self, **fields: Any) -> Event:
        """Append one event; the caller holds the lock (the hard link still refuses a taken number)."""
        folder = self.root / "events"
        folder.mkdir(parents=True, exist_ok=True)
        events = self.events()
        event = Event(seq=events[-1].seq + 1 if events else 1, at=_now(), actor=_actor(), **fields)
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
        return self._read_version(self.root / "versions" / vid)

    def _read_version(self, folder: Path) -> ModelVersion:
        path, fix = folder / "version.json", "restore the version folder from a backup (versions are never edited)"
        version = read_record(path, ModelVersion, MAX_VERSION_BYTES, "version", fix)
        if version.id != folder.name:
            raise RegistryError(f"{path} holds version {version.id}, not the one its folder names: {fix}")
        return version

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
        for part in ("events", "versions"):  # both first: a command killed while copying leaves a registry
            (self.root / part).mkdir(parents=True, exist_ok=True)
        if not target.exists():
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
                try:
                    os.replace(tmp, target)
                except OSError as err:  # the same adapter registered by another command at the same moment
                    if err.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not (target / "version.json").is_file():
                        raise
                    shutil.rmtree(tmp, ignore_errors=True)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        version = self._read_version(target)
        with self._locked(create=True):
            self._append(action="register", version=vid, alias="candidate", previous=self.aliases().get("candidate"))
        return version

    def verify_files(self, version: ModelVersion) -> list[str]:
        """Files whose content no longer matches the recorded hash ([] when intact)."""
        base = self.path(version)
        real = self.root.resolve() / "versions" / version.id  # any symlink on the way makes the files "changed"
        return [rel for rel, digest in version.files.items()
                if (base / rel).resolve() != real / rel or not (base / rel).is_file()
                or file_sha256(base / rel) != digest]

    def promote(self, ref: str, gate: dict[str, Any] | None, override: str | None = None,
                gated_against: str | None = None) -> Event:
        """Move production to a version: only with a passing gate, or an explicit override with its reason.
        ``gated_against``: the production version whose own eval was the gate's baseline; production must still be
        it under the lock (a rollback or promotion meanwhile would make the gate's comparison stale)."""
        version = self.version(ref)
        if not (gate and gate.get("passed")) and not (override and override.strip()):
            raise RegistryError(f"the gate did not pass for {version.id}: production stays at "
                                f"{self.aliases().get('production', '(none)')}; "
                                "pass --override REASON to promote anyway")
        with self._locked():  # previous is what production is right before this event, not when we started
            previous = self.aliases().get("production")
            if gated_against is not None and previous != gated_against:
                raise RegistryError(f"production moved from {gated_against} to {previous or '(none)'} while "
                                    f"{version.id} was gated against {gated_against}'s eval: nothing promoted; "
                                    "run promote again")
            return self._append(action="promote", version=version.id, alias="production", gate=gate,
                                previous=previous, override=override if override else None)

    def production_stack(self) -> list[str]:
        """Promotions still in force, oldest first: promote pushes, rollback pops."""
        return replayed(self.events(), self.root / "events")

    def rollback(self) -> Event:
        """Production back to the version it pointed to before the current promotion."""
        with self._locked():
            stack = self.production_stack()
            if len(stack) < 2:
                raise RegistryError(f"nothing to roll back to: production is {stack[-1] if stack else '(unset)'} "
                                    "and had no earlier version")
            return self._append(action="rollback", version=stack[-2], alias="production", previous=stack[-1])
