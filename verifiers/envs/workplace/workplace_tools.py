"""The simulated company behind the workplace environment: tools as functions over one session's state.

Contract: the state is plain JSON, one table per kind (emails, events, projects, tasks, contacts, deals,
interactions), each a dict from record id to record. A tool takes the state and its (already schema-checked)
arguments, may change the state in place, and returns a JSON observation; a bad id raises ``ToolError``,
which the session turns into an error observation. Records a tool creates get ids ``NEW-<table>-<n>``, n one past
the table's size, the highest such n in the table and, in a session, the highest n it issued or its initial state
held (``new_id``, ``ISSUED``): deterministic, and never the id of a record in the table nor of one deleted earlier in
the session, so a creation after a delete neither overwrites an earlier record nor takes its id (the session's
record of what it created and who it reached is by id); the reward compares created records by content, not by id.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

State = dict[str, dict[str, dict[str, Any]]]
TABLES = ("emails", "events", "projects", "tasks", "contacts", "deals", "interactions")
ME = "me@acme.example"
# A session's table -> the highest n of a NEW-<table>-<n> id it issued or its initial state held, set by the Session
# around each call (its ``issued``); only grows, so a deleted record's id is never issued again. None: no session.
ISSUED: ContextVar[dict[str, int] | None] = ContextVar("ISSUED", default=None)


# The fields of a record the tools read, per table (a tool on a record without them would raise KeyError), and
# those that must be strings (``reply_email`` writes "Re: " + subject).
READS: dict[str, tuple[str, ...]] = {
    "emails": ("from", "subject", "body", "folder"), "events": ("date",), "projects": ("name",),
    "tasks": ("project_id", "assignee"), "contacts": ("name", "company"), "deals": ("company",), "interactions": (),
}
STRINGS: dict[str, tuple[str, ...]] = {"emails": ("subject",)}


def records_problem(name: str, state: dict[str, Any]) -> str | None:
    """Why the tools cannot work on ``state`` (already {table: {id: record object}}), or None: every table is
    there and every record has the fields the tools read (``READS``, ``STRINGS``)."""
    missing = [t for t in TABLES if t not in state]
    if missing:
        return f"reference.{name} has no {', '.join(missing)} table: a workplace state has all of {', '.join(TABLES)}"
    for table, fields in READS.items():
        for rid, record in state[table].items():
            absent = [f for f in fields if f not in record]
            if absent:
                return f"reference.{name}.{table}.{rid} has no {', '.join(absent)}: the tools read them"
            wrong = [f for f in STRINGS.get(table, ()) if not isinstance(record[f], str)]
            if wrong:
                return f"reference.{name}.{table}.{rid}.{wrong[0]} must be a string"
    return None


class ToolError(ValueError):
    """The agent asked for something that does not exist; it sees the message and can recover."""


def empty_state() -> State:
    return {t: {} for t in TABLES}


def _get(state: State, table: str, rid: str) -> dict[str, Any]:
    record = state[table].get(rid)
    if record is None:
        raise ToolError(f"no {table[:-1]} with id {rid!r}")
    return record


def highest(records: dict[str, Any], table: str) -> int:
    """The highest n of a ``NEW-<table>-<n>`` id in ``records`` (0 when none; longer numbers are ignored)."""
    prefix = f"NEW-{table}-"
    numbers = (rid[len(prefix):] for rid in records if rid.startswith(prefix))
    return max((int(n) for n in numbers if n.isascii() and n.isdigit() and len(n) < 10), default=0)


def new_id(records: dict[str, Any], table: str, floor: int = 0) -> str:
    """The id of the next record created in ``records`` (the table ``table``): ``NEW-<table>-<n>`` with n past the
    table's size (the plain numbering while nothing was deleted), past every n already there and
    past ``floor`` (the highest n the session issued)."""
    prefix = f"NEW-{table}-"
    n = max(len(records), highest(records, table), floor) + 1
    while f"{prefix}{n}" in records:  # a crafted state's longer numbers: at most one step per record
        n += 1
    return f"{prefix}{n}"


def _new(state: State, table: str, record: dict[str, Any]) -> dict[str, Any]:
    issued = ISSUED.get()
    rid = new_id(state[table], table, issued.get(table, 0) if issued is not None else 0)
    if issued is not None:
        issued[table] = int(rid.rsplit("-", 1)[1])
    state[table][rid] = record
    return {"id": rid, **record}


def _matches(text: str, *fields: Any) -> bool:
    needle = text.casefold().strip()
    return any(needle in str(f).casefold() for f in fields)


def search_emails(state: State, query: str) -> dict[str, Any]:
    hits = [{"id": i, "from": e["from"], "subject": e["subject"], "folder": e["folder"]}
            for i, e in state["emails"].items()
            if _matches(query, e["from"], e["subject"], e["body"])]
    return {"emails": hits}


def read_email(state: State, email_id: str) -> dict[str, Any]:
    return {"id": email_id, **_get(state, "emails", email_id)}


def send_email(state: State, to: list[str], subject: str, body: str) -> dict[str, Any]:
    return _new(state, "emails", {"from": ME, "to": sorted(to), "subject": subject, "body": body, "folder": "sent"})


def reply_email(state: State, email_id: str, body: str) -> dict[str, Any]:
    original = _get(state, "emails", email_id)
    return send_email(state, [original["from"]], "Re: " + original["subject"], body)


def archive_email(state: State, email_id: str) -> dict[str, Any]:
    _get(state, "emails", email_id)["folder"] = "archive"
    return {"archived": email_id}


def delete_email(state: State, email_id: str) -> dict[str, Any]:
    _get(state, "emails", email_id)
    del state["emails"][email_id]
    return {"deleted": email_id}


def list_events(state: State, date: str) -> dict[str, Any]:
    return {"events": [{"id": i, **e} for i, e in state["events"].items() if e["date"] == date]}


def create_event(state: State, title: str, date: str, time: str, duration_minutes: int,
                 attendees: list[str] | None = None) -> dict[str, Any]:
    return _new(state, "events", {"title": title, "date": date, "time": time, "duration_minutes": duration_minutes,
                                  "attendees": sorted(attendees or [])})


def update_event(state: State, event_id: str, date: str | None = None, time: str | None = None,
                 duration_minutes: int | None = None) -> dict[str, Any]:
    event = _get(state, "events", event_id)
    for key, value in (("date", date), ("time", time), ("duration_minutes", duration_minutes)):
        if value is not None:
            event[key] = value
    return {"id": event_id, **event}


def cancel_event(state: State, event_id: str) -> dict[str, Any]:
    _get(state, "events", event_id)
    del state["events"][event_id]
    return {"cancelled": event_id}


def find_project(state: State, name: str) -> dict[str, Any]:
    return {"projects": [{"id": i, **p} for i, p in state["projects"].items() if _matches(name, p["name"])]}


def list_tasks(state: State, project_id: str | None = None, assignee: str | None = None) -> dict[str, Any]:
    tasks = [{"id": i, **t} for i, t in state["tasks"].items()
             if (project_id is None or t["project_id"] == project_id)
             and (assignee is None or _matches(assignee, t["assignee"]))]
    return {"tasks": tasks}


def create_task(state: State, project_id: str, title: str, assignee: str, priority: str = "medium") -> dict[str, Any]:
    _get(state, "projects", project_id)
    return _new(state, "tasks", {"project_id": project_id, "title": title, "assignee": assignee, "status": "todo",
                                 "priority": priority})


def update_task(state: State, task_id: str, status: str | None = None, assignee: str | None = None,
                priority: str | None = None) -> dict[str, Any]:
    task = _get(state, "tasks", task_id)
    for key, value in (("status", status), ("assignee", assignee), ("priority", priority)):
        if value is not None:
            task[key] = value
    return {"id": task_id, **task}


def delete_task(state: State, task_id: str) -> dict[str, Any]:
    _get(state, "tasks", task_id)
    del state["tasks"][task_id]
    return {"deleted": task_id}


def find_contact(state: State, name: str) -> dict[str, Any]:
    return {"contacts": [{"id": i, **c} for i, c in state["contacts"].items()
                         if _matches(name, c["name"], c["company"])]}


def list_deals(state: State, company: str) -> dict[str, Any]:
    return {"deals": [{"id": i, **d} for i, d in state["deals"].items() if _matches(company, d["company"])]}


def update_deal_stage(state: State, deal_id: str, stage: str) -> dict[str, Any]:
    deal = _get(state, "deals", deal_id)
    deal["stage"] = stage
    return {"id": deal_id, **deal}


def log_interaction(state: State, contact_id: str, kind: str, summary: str) -> dict[str, Any]:
    _get(state, "contacts", contact_id)
    return _new(state, "interactions", {"contact_id": contact_id, "kind": kind, "summary": summary})


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {f.__name__: f for f in (
    search_emails, read_email, send_email, reply_email, archive_email, delete_email, list_events, create_event,
    update_event, cancel_event, find_project, list_tasks, create_task, update_task, delete_task, find_contact,
    list_deals, update_deal_stage, log_interaction)}
