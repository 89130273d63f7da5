"""What a workplace session did, beyond where it ended: the changes its reward compares with the golden ones.

- ``changes(before, after)``: the final-state diff, a multiset of canonical change records (a modified or deleted
  record by id, a created record by content: its generated id is ignored).
- ``undone``: effects that outlast a later undo, counted on top of that diff unless the golden diff has the same
  change: an outside effect (a created record that reached someone: an email sent, an event with attendees) whose
  record is gone, and an edit of an initial record the golden diff leaves alone that a later call put back.
- Bounded memory: one 16-byte digest per outside effect (``digested``), one (table, id) per edited record.
The rules and why: this env's README.md.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

from flywheel.schemas import canonical_json
from flywheel.verifiers.json_values import normalize

RECIPIENTS = ("to", "attendees")  # the fields of a created record that name whom its creation reached


def created_key(table: str, record: Any) -> str:
    return canonical_json(["create", table, repr(normalize(record))])


def changes(before: dict[str, Any], after: dict[str, Any]) -> Counter[str]:
    """What ``after`` changed relative to ``before``, as a multiset of canonical change records."""
    out: Counter[str] = Counter()
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table, {}), after.get(table, {})
        for rid in old.keys() | new.keys():
            if rid not in new:
                out[canonical_json(["delete", table, rid])] += 1
            elif rid not in old:
                out[created_key(table, new[rid])] += 1
            elif normalize(old[rid]) != normalize(new[rid]):
                out[canonical_json(["update", table, rid, repr(normalize(new[rid]))])] += 1
    return out


def digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


def digested(keys: Counter[str]) -> Counter[bytes]:
    out: Counter[bytes] = Counter()
    for key, n in keys.items():
        out[digest(key)] += n
    return out


def reaches_someone(record: Any) -> bool:
    return isinstance(record, dict) and any(record.get(f) for f in RECIPIENTS)


def edited(initial: dict[str, Any], state: dict[str, Any], args: dict[str, Any]) -> set[tuple[str, str]]:
    """The records of ``initial`` named by a call's arguments that now differ from their initial value or are gone
    (a tool changes only records its arguments name: ``workplace_tools``)."""
    return {(table, rid) for rid in args.values() if isinstance(rid, str)
            for table, records in initial.items() if isinstance(records, dict) and rid in records
            and normalize(state.get(table, {}).get(rid)) != normalize(records[rid])}


def golden_records(initial: dict[str, Any], final: dict[str, Any]) -> set[tuple[str, str]]:
    """The records of ``initial`` the golden final state modifies or deletes."""
    return {(t, rid) for t, records in initial.items() for rid, record in records.items()
            if rid not in final.get(t, {}) or normalize(final[t][rid]) != normalize(record)}


def undone(initial: dict[str, Any], golden_final: dict[str, Any], final: dict[str, Any],
           notified: dict[str, tuple[str, bytes]], touched: Iterable[tuple[str, str]]) -> Counter[bytes]:
    """The digested changes a session made that its final state no longer shows: outside effects whose record is
    gone (``notified``: created id -> (table, digest of its creation)) and reverted edits of initial records the
    golden diff leaves alone (``touched``)."""
    out = Counter(key for rid, (table, key) in notified.items() if rid not in final.get(table, {}))
    golden = golden_records(initial, golden_final)
    for table, rid in set(touched) - golden:
        if rid in final.get(table, {}) and normalize(final[table][rid]) == normalize(initial[table][rid]):
            out[digest(canonical_json(["edited", table, rid]))] += 1
    return out
