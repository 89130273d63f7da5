"""The sql verifier: one SQLite query run read-only and bounded (``engine``) on the task's tables, its result set
compared with the reference's on the shown tables and on held-back copies (``variants``), so a literal or
hard-coded answer fails (``hardcoded_result``, ``no_table_read``). The reference is checked once per task in its
own bounded call; a reference that cannot grade is ``verifier_error``. Failure classes, reward-hack decisions and
bounds: this env's README.md."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from flywheel.schemas import Task, Verdict
from flywheel.verifiers import bounds
from flywheel.verifiers.common import batch_rewards, guarded_verify
from flywheel.verifiers.envs.sql import engine, literals, variants
from flywheel.verifiers.envs.sql.query_text import (  # noqa: F401 - re-exported
    FormatError,
    extract_query,
    one_statement,
    statement_count,
    top_level_order_by,
)

NAME = "sql"
VERSION = "1.6.0"  # history: CHANGELOG.md
MAX_CHARS = engine.MAX_SQL
MAX_COMPLETION = 4 * MAX_CHARS  # a query plus the prose around its block
PERTURB_ATTEMPTS = 4
GROWTH_TRIES = 8  # rows tried for a grown copy (variants.grown) when no held-back copy grows the result
MAX_PROBED_ROWS = 40  # rows tried one by one for the reference's dependence on them (probed_rows)
LIMITS = bounds.Limits(cpu_s=4, wall_s=12.0, memory_bytes=1 << 30, warm=("flywheel.verifiers.envs.sql.engine",))


def _outcome(conn_state: dict[str, Any], query: str, tables: set[str]) -> tuple[str, Any]:
    conn = engine.build(conn_state)
    try:
        return "ok", engine.run_query(conn, one_statement(query), tables)
    except engine.QueryError as err:
        return err.kind, str(err)
    finally:
        conn.close()


class ReferenceProblem(ValueError):
    """The task's reference cannot grade anything: ``kind`` names why (a ``reference_problem`` reason)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


Copies = list[tuple[dict[str, Any], list[Any]]]  # (held-back tables, the reference's result on them)
Reference = tuple[list[Any], Copies]


def probed_rows(state: dict[str, Any], task_id: str) -> list[variants.Row]:
    """The rows ``selected_rows`` tries: every row of tables up to ``MAX_PROBED_ROWS`` rows in all, else that many
    taken from the tables in turn, each table's rows in an order drawn from the task id (so a big first table
    never hides the others)."""
    orders = []
    for table in sorted(state):
        rows = list(range(len(state[table]["rows"])))
        variants._rng("probe", task_id, table).shuffle(rows)
        orders.append([(table, i) for i in rows])
    picked: list[variants.Row] = []
    for k in range(max((len(o) for o in orders), default=0)):
        picked += [o[k] for o in orders if k < len(o)]
    return sorted(picked[:MAX_PROBED_ROWS])


def selected_rows(state: dict[str, Any], reference: str, visible: list[Any], ordered: bool,
                  task_id: str = "") -> list[variants.Row]:
    """The rows (of ``probed_rows``) without which the reference's result changes: those a held-back copy drops
    or clones for sure. One database, each row deleted and restored in turn (``engine.without_row``)."""
    tables, found = set(state), []
    conn = engine.build(state)
    try:
        for table, i in probed_rows(state, task_id):
            columns = [str(c[0]) for c in state[table]["columns"]]
            with engine.without_row(conn, table, i, columns) as probing:
                if not probing:
                    continue
                try:
                    rows = engine.run_query(conn, one_statement(reference), tables)[0]
                except engine.QueryError:
                    rows = None
            if rows is None or not engine.same_result(rows, visible, ordered):
                found.append((table, i))
    finally:
        conn.close()
    return found


def reference_results(state_json: str, task_id: str, reference: str) -> Reference:
    """(visible result, [(held-back tables, held-back result), ...]) of the reference query; ReferenceProblem when it
    fails, returns nothing but NULLs, or no held-back copy changes its result (a literal answer would then pass)."""
    import json

    state = json.loads(state_json)
    tables = set(state)
    status, value = _outcome(state, reference, tables)
    if status != "ok":
        raise ReferenceProblem("bad_reference", f"the reference query fails ({status}): {value}")
    visible = value[0]
    if not any(v is not None for row in visible for v in row):
        raise ReferenceProblem("empty_reference_result", "the reference query returns no rows (or only NULLs)")
    keep, ordered = literals.string_literals(reference), top_level_order_by(reference)
    selected, fixed = selected_rows(state, reference, visible, ordered, task_id), literals.id_literals(reference)
    copies = []
    for attempt in range(PERTURB_ATTEMPTS):
        held = variants.held_back(state, task_id, keep, attempt, selected, fixed)
        status, value = _outcome(held, reference, tables)
        if status != "ok":
            raise ReferenceProblem("bad_reference", f"the reference query fails on the held-back copy ({status}): "
                                                    f"{value}")
        copies.append((held, value[0]))
    # a copy whose result has more rows than the shown one, so the reference plus LIMIT <rows shown> fails: the
    # tables plus a row the result depends on cloned as a new entity (variants.grown), the first that grows it
    clonable = [row for row in selected if row not in variants.protected(state, keep)]
    for row in clonable[:GROWTH_TRIES] if not any(len(r) > len(visible) for _, r in copies) else []:
        held = variants.grown(state, task_id, keep, row, fixed)
        status, value = _outcome(held, reference, tables)
        if status == "ok" and len(value[0]) > len(visible):
            copies.append((held, value[0]))
            break
    if all(engine.same_result(result, visible, ordered) for _, result in copies):
        raise ReferenceProblem("static_reference_result", f"none of {PERTURB_ATTEMPTS} held-back copies changes "
                                                          "the reference's result, so a literal answer would pass")
    return visible, copies


@lru_cache(maxsize=256)
def _bounded_reference(state_json: str, task_id: str, reference: str) -> Reference:
    """reference_results in its own bounded call, once per task: a slow reference is the task's fault, never the
    completion's (lru_cache keeps no exception: a broken task is tried again, and is verifier_error each time)."""
    try:
        return bounds.run(reference_results, state_json, task_id, reference, limits=LIMITS)
    except bounds.BoundExceeded as err:
        raise ReferenceProblem("bad_reference", f"the reference query crosses the verifier's bound ({err})") from None


def check(state_json: str, reference: str, query: str, ref: Reference) -> tuple[str, str]:
    """(failure class or "", details): the candidate's comparison, run in the bounded worker; ``ref`` is
    reference_results'."""
    import json

    visible, copies = ref
    tables = set(json.loads(state_json))
    ordered = top_level_order_by(reference)
    status, value = _outcome(json.loads(state_json), query, tables)
    if status != "ok":
        return status, value
    rows, read = value
    if not read:
        return "no_table_read", "the query reads none of the task's tables"
    if not engine.same_result(rows, visible, ordered):
        return "wrong_result", f"{len(rows)} rows, expected {len(visible)}; first {rows[:2]!r}"[:300]
    for n, (held, held_result) in enumerate(copies, start=1):
        status, value = _outcome(held, query, tables)
        if status != "ok":
            return status, f"on held-back copy {n}: {value}"
        if not engine.same_result(value[0], held_result, ordered):
            return "hardcoded_result", f"matches on the shown tables but not on held-back copy {n} of {len(copies)}"
    return "", f"{len(rows)} rows match" + (" in order" if ordered else "")


def _verdict(reward: float, failure: str | None, details: str) -> Verdict:
    return Verdict(reward=reward, valid=True, failure_class=failure, components={"correct": float(reward == 1.0)},
                   details=details, verifier=NAME, verifier_version=VERSION)


def _score(task: Task, completion: str) -> Verdict:
    import json

    if not task.reference.answer or not task.reference.state:
        raise ValueError("sql task needs reference.answer (the query) and reference.state (the tables)")
    state_json = json.dumps(task.reference.state, sort_keys=True)
    ref = _bounded_reference(state_json, task.id, task.reference.answer)  # ReferenceProblem: verifier_error
    if len(completion) > MAX_COMPLETION:
        return _verdict(0.0, "too_large", f"completion of {len(completion)} characters (bound {MAX_COMPLETION})")
    try:
        query = extract_query(completion)
    except FormatError as err:
        return _verdict(0.0, "format_error", str(err))
    if len(query) > MAX_CHARS:
        return _verdict(0.0, "too_large", f"query of {len(query)} characters (bound {MAX_CHARS})")
    if statement_count(query) > 1:
        return _verdict(-1.0, "unsafe", "more than one statement")
    try:
        failure, details = bounds.run(check, state_json, task.reference.answer, query, ref, limits=LIMITS)
    except bounds.BoundExceeded as err:
        return _verdict(0.0, "too_large" if err.kind == "memory" else "timeout", str(err))
    if failure == "unsafe":
        return _verdict(-1.0, "unsafe", details)
    return _verdict(0.0 if failure else 1.0, failure or None, details)


def verify(task: Task, completion: str) -> Verdict:
    """Score one query; a verifier crash (a broken reference included) becomes valid=False data, never reward 0."""
    return guarded_verify(NAME, VERSION, _score, task, completion)


def sql_reward(completions: list[Any], task: list[Any], **kw: Any) -> list[float | None]:
    """TRL reward function (``task`` column); rows of other envs give None."""
    return batch_rewards(NAME, verify, completions, task, **kw)
