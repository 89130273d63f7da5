"""Reading a model registry's files, checked: an event or ``version.json`` as its model, and the audit log replayed.

A damaged log (a file that is not strict JSON or not an event, a number that does not match its name, a missing
number, a promotion of a version never registered, a rollback to a version that was not the one before) or a
damaged ``version.json`` is a RegistryError naming the file, never a guess. Files are read only as regular files of
bounded size (a FIFO or ``/dev/zero`` swapped in is refused at once).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from flywheel.schemas.registry import Event
from flywheel.tasks.files import read_regular

MAX_EVENT_BYTES = 1 << 20  # an event is a few hundred bytes; a gate summary a few KB
MAX_VERSION_BYTES = 16 << 20  # version.json: a training config, metrics and the file hashes
FIX = "the audit log is damaged; restore this file from a backup (events are append-only, never edit them)"


class RegistryError(ValueError):
    """The registry refuses the change; the message says why and what to do."""


def strict_json(path: Path, max_bytes: int) -> Any:
    """A registry file's JSON: a regular file of bounded size, strict JSON (no NaN or Infinity); errors name it."""
    try:
        return orjson.loads(read_regular(path, max_bytes))
    except orjson.JSONDecodeError as err:
        raise RegistryError(f"{path} is not strict JSON ({err})") from None
    except (OSError, ValueError) as err:
        raise RegistryError(f"{path} cannot be read ({getattr(err, 'strerror', None) or err})") from None


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    return f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"


def read_record(path: Path, model: type[Any], max_bytes: int, what: str, fix: str) -> Any:
    """One registry file as ``model``; every failure is one RegistryError naming the file and ending in ``fix``."""
    try:
        return model.model_validate(strict_json(path, max_bytes))
    except RegistryError as err:
        raise RegistryError(f"{err}: {fix}") from None
    except ValidationError as err:
        raise RegistryError(f"{path} is not a registry {what} ({_first_error(err)}): {fix}") from None


def read_event(path: Path) -> Event:
    """One event file, checked: a damaged audit log is reported, never replayed with a guess."""
    event = read_record(path, Event, MAX_EVENT_BYTES, "event", FIX)
    if f"{event.seq:06d}.json" != path.name:
        raise RegistryError(f"{path} holds event {event.seq}, not the one its name says: {FIX}")
    return event


def replayed(events: list[Event], folder: Path) -> list[str]:
    """The promotions in force after ``events`` (promote pushes, rollback pops), checking that the log holds
    every number from 1 and moves production only to versions registered before and back only to the one before."""
    registered: set[str] = set()
    stack: list[str] = []
    for number, e in enumerate(events, 1):
        where = f"{folder / f'{e.seq:06d}.json'}"
        if e.seq != number:
            raise RegistryError(f"event {number} is missing from {folder} (the log goes on at {e.seq}): {FIX}")
        if e.action == "register":
            registered.add(e.version)
        elif e.version not in registered:
            raise RegistryError(f"{where} {e.action}s {e.version}, which no earlier event registered: {FIX}")
        if e.action == "promote":
            stack.append(e.version)
        elif e.action == "rollback":
            if len(stack) < 2 or (e.version, e.previous) != (stack[-2], stack[-1]):
                raise RegistryError(f"{where} rolls production back to {e.version} from {e.previous}, but the "
                                    f"promotions before it say {stack[-2:] or 'nothing'}: {FIX}")
            stack.pop()
    return stack
