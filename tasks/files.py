"""The one file writer: readers never see half a file, and whatever the target names is never damaged.

``open_output`` (and ``write_text_atomic`` / ``write_bytes_atomic`` built on it) writes a regular file through a
temp file in the same folder, fsynced and renamed over the target; a symlink's target the same way (the link stays);
a device, FIFO or socket in place, never replaced. Any failure removes the temp file and leaves the target as it
was. Errors are :class:`OutputError`, one line that names the path and what to do. The same module holds the
checks on where outputs may go (``check_destination``) and the bounded reader ``read_regular``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any, BinaryIO


class OutputError(OSError, ValueError):
    """The target cannot be written; the message names it and what to do (both OSError and ValueError, so the
    callers that turn either into a one-line error keep doing so)."""


def _umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _describe(path: Path, exc: OSError) -> OutputError:
    if exc.errno == errno.ENOSPC:
        why = "no space left on device; free space or choose another path"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "permission denied; choose a path you can write"
    elif exc.errno == errno.ENXIO:
        why = "it is a FIFO with no reader (or a socket); start the reader first or name a regular file"
    else:
        why = f"{exc.strerror or exc}; choose another path"
    return OutputError(f"cannot write {path}: {why}")


@contextlib.contextmanager
def _write_through(path: Path) -> Generator[BinaryIO, None, None]:
    """Write into an existing device, FIFO or socket in place: no temp file, no rename, no O_CREAT."""
    # O_NONBLOCK: a FIFO without a reader is ENXIO at once instead of a hang; blocking writes afterwards
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    with os.fdopen(fd, "wb") as f:
        yield f
        f.flush()


@contextlib.contextmanager
def _replace(target: Path) -> Generator[BinaryIO, None, None]:
    """A unique temp file beside ``target``, fsynced and renamed over it; removed on any failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        old: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes it 0600; setuid/setgid are not carried over to new content (the kernel drops them on write)
        os.chmod(tmp, stat.S_IMODE(old.st_mode) & ~(stat.S_ISUID | stat.S_ISGID) if old else 0o666 & ~_umask())
        if old and (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
            with contextlib.suppress(PermissionError):  # keep the owner where we may (root writing a user's file)
                os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _same_file(path: Path, st: os.stat_result) -> bool:
    """Whether ``path`` names the file ``st`` describes (a magic /proc link to a deleted file resolves to a path
    that does not, or that names another file)."""
    try:
        found = os.stat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino)


@contextlib.contextmanager
def open_output(path: Path | str) -> Generator[BinaryIO, None, None]:
    """A binary file to write ``path`` through; OSErrors become one-line OutputErrors. By what the target is:

    - a new path or an existing regular file: the data goes to a unique temp file in the same folder
      (``tempfile.mkstemp``), is fsynced, then renamed over the target, so readers see the old file or the new one
      whole. An existing file keeps its mode, less setuid/setgid (as the kernel drops them on a write), and its owner
      where allowed; a new one gets ``0o666 & ~umask``. Renaming, chosen over writing in place (which would expose
      half a file and, on a failure, damage every name), splits a hard-linked file (the named path gets the new
      data, the other names keep the old file), and needs a folder that lets this user create and rename files: a
      file this user may write inside a read-only folder, or another user's file in a sticky folder such as /tmp, is
      refused ("permission denied"), never written half-way in place.
    - a symlink: its resolved target is written the same way; the link stays a link. A link that leads to a file with
      no path of its own (``/proc/self/fd/N`` or ``/dev/stdout`` of a deleted file) is refused: resolving it would
      create a new file named after it (``x (deleted)``).
    - an existing non-regular file (character or block device, FIFO, socket): written through in place, never
      replaced or removed (``/dev/null`` works; ``/dev/full`` is a "no space" error; a FIFO needs a reader).
    - a directory: an error."""
    path = Path(path)
    try:
        try:
            st: os.stat_result | None = os.stat(path)  # follows symlinks: what the data would land in
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise OutputError(f"cannot write {path}: it is a directory; name a file")
        if st is not None and not stat.S_ISREG(st.st_mode):
            writer = _write_through(path)
        elif path.is_symlink():  # written through to its target (even a dangling one's); the link stays
            target = Path(os.path.realpath(path))
            if st is not None and not _same_file(target, st):
                raise OutputError(f"cannot write {path}: it leads to a file with no path of its own (deleted, or seen "
                                  "only through /proc); name the file's real path")
            writer = _replace(target)
        else:
            writer = _replace(path)
        with writer as f:
            yield f
    except OutputError:
        raise
    except OSError as exc:
        raise _describe(path, exc) from None


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    with open_output(path) as f:
        f.write(data)


def write_text_atomic(path: Path | str, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def share_tree(folder: Path) -> None:
    """Give a folder this process built in private (``mkdtemp`` is 0700; safetensors writes 0600) the modes any new
    file gets, before it is published by a rename: folders ``0o777 & ~umask``, files ``0o666 & ~umask``. A worker or
    server under another uid reads a published adapter, registry version or export as it reads any other output.
    Only what this user owns outright changes: a symlink (never followed), a hard-linked file (its other names would
    change too), a device or FIFO, or another user's entry keeps its mode."""
    if os.path.islink(folder):
        return
    mask = _umask()
    for root, _dirs, files in os.walk(folder):
        _chmod_own(root, 0o777 & ~mask, directory=True)
        for name in files:
            _chmod_own(os.path.join(root, name), 0o666 & ~mask)


def _chmod_own(path: str, mode: int, directory: bool = False) -> None:
    """chmod through a descriptor opened without following a link, so a link swapped in after the walk saw a file
    is not followed either."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0))
    except OSError:  # a symlink (ELOOP), gone, or unreadable: not this function's to change
        return
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and (directory or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``: a symlink, FIFO, device or folder is an OSError at
    once (never a hang on a FIFO, never /dev/zero read for ever), a bigger file a ValueError ("larger than N KB")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(exc.errno, "a symlink, not a regular file", str(path)) from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes // 1024} KB")
    return data


def read_claim(saved: Path, what: str) -> dict[str, Any] | None:
    """The options a run recorded in ``saved`` (a JSON object, read bounded and strict), None when there is none;
    ValueError when it is not one (a FIFO, a link to a device, a list: one line, never a hang)."""
    from flywheel.schemas.records import strict_json  # here, not above: the vLLM worker imports this module

    if not (saved.exists() or saved.is_symlink()):
        return None
    try:
        found = strict_json(read_regular(saved, 64 << 20))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ValueError(f"{saved} is not {what} ({why}): pass a new --out") from None
    if not isinstance(found, dict):
        raise ValueError(f"{saved} is not {what} (not a JSON object): pass a new --out")
    return found


def changed_options(found: dict[str, Any], config: Any, ignored: frozenset[str] = frozenset()) -> list[str]:
    """The options of ``config`` (a pydantic model) whose JSON value differs from the recorded ``found``, but
    ``ignored``, and any option ``found`` has that ``config`` does not know; an option added since the record was
    written reads as its default: the same run, resumable after an upgrade."""
    from pydantic_core import to_jsonable_python

    mine = config.model_dump(mode="json")
    defaults = {k: to_jsonable_python(f.default) for k, f in type(config).model_fields.items() if not f.is_required()}
    old = {**{k: v for k, v in mine.items() if k not in found and k in defaults and v == defaults[k]}, **found}
    return [k for k in (*mine, *(set(found) - set(mine))) if k not in ignored
            and old.get(k, "(not recorded)") != mine.get(k, "(not an option)")]


def published_version(path: Path) -> Path | None:
    """The published dataset version folder (``v-`` and 12 hex digits, holding manifest.json) that ``path`` is or
    lies in, links resolved; None when it is in none."""
    resolved = path.resolve()
    for folder in (resolved, *resolved.parents):
        if re.fullmatch(r"v-[0-9a-f]{12}", folder.name) and (folder / "manifest.json").is_file():
            return folder
    return None


# what ``tasks/release/registry.py`` writes in each of a registry's two folders (events, versions; temp names too)
REGISTRY_ENTRIES = {"events": re.compile(r"[0-9]{6,}\.json|\.event-.*"),
                    "versions": re.compile(r"mv-[0-9a-f]{12}|\.tmp-.*")}


def is_registry(folder: Path) -> bool:
    """The one definition of a model registry (``check_destination``, ``Registry.exists``, ``check_train_paths``):
    a folder holding events/ and versions/, or, beside the registry's .lock, one of them holding only what the
    registry writes there (event files, version folders, their temp names) or nothing: a first ``register`` killed
    before it made the other folder leaves a registry half made, still a registry (outputs are refused inside it,
    ``--registry`` uses it). A lone events/ or versions/ without the lock, or of other files, is not one (an empty
    ~/versions must not make the home folder a registry). Links are followed; an unreadable half one counts."""
    parts = [name for name in REGISTRY_ENTRIES if (folder / name).is_dir()]
    if len(parts) != 1:
        return len(parts) == 2
    if not (folder / ".lock").is_file():
        return False
    try:
        return all(REGISTRY_ENTRIES[parts[0]].fullmatch(entry.name) for entry in (folder / parts[0]).iterdir())
    except OSError:
        return True  # the registry's lock beside it: refuse writes there rather than guess


def registry_root(path: Path) -> Path | None:
    """The model registry (``is_registry``) that ``path`` is or lies in, links resolved; None when it is in none."""
    resolved = path.resolve()
    for folder in (resolved, *resolved.parents):
        if is_registry(folder):
            return folder
    return None


def check_destination(path: Path, option: str, registry_ok: bool = False) -> None:
    """ValueError when ``path`` (an output: a file or a folder to write in) lies inside a published dataset version
    or, unless ``registry_ok`` (the registry's own commands), a model registry: only ``publish`` and the registry
    write there. Run by the CLI before any flow and by each flow at its start (a deployment run skips the CLI)."""
    version = published_version(path)
    if version is not None:
        raise ValueError(f"{option} {path} is inside the published dataset version {version}: a version is never "
                         f"written to (its files are checked against manifest.json); choose a path outside it")
    registry = None if registry_ok else registry_root(path)
    if registry is not None:
        raise ValueError(f"{option} {path} is inside the model registry {registry}: only registry commands write "
                         "there (its versions are checked against their hashes); choose a path outside it")
