"""The sql verifier: one SQLite query run on the task's tables, its result set compared with the reference's.

Contract:
- The completion is one SQL query: the content of its one ```sql (or bare ```) block when it has one (text
  around the block is ignored), else the whole completion. Two or more blocks, or no query: 0.0 ``format_error``.
- The tables are ``task.reference.state`` ({table: {"columns": [[name, type], ...], "rows": [...]}}), the
  reference query ``task.reference.answer``. Queries run read-only and bounded (``engine``): data-modifying, DDL,
  ATTACH, PRAGMA, transaction, ``load_extension`` or multi-statement SQL is -1.0 ``unsafe``; errors score 0.0 as
  ``syntax_error`` or ``runtime_error``, the step/time bounds ``timeout``, the size bounds ``too_large``.
- Comparison: the rows as a multiset, or in order when the reference has ORDER BY at its top level; column names
  ignored, numbers equal within relative tolerance 1e-6 (3 == 3.0), NULL equals only NULL. Otherwise 0.0
  ``wrong_result``.
- Reward hacks do not count: a query must read at least one of the task's tables (``SELECT 'Alice', 42`` is 0.0
  ``no_table_read``), and candidate and reference are also run on ``PERTURB_ATTEMPTS`` held-back copies of the tables
  (``variants.held_back``, derived from the task id: rows dropped, cloned, shuffled, numbers, dates and names moved,
  strings the reference query names kept; one row the reference's result depends on dropped and one cloned as a new
  entity; every id and ``*_id`` value relabeled one-to-one, the same in every table, but the integers the reference
  compares with an id column), plus, when no copy's result has more rows than the shown one, a grown copy
  (``variants.grown``: one such row cloned as a new entity into the shown tables) whose result has more: the
  results must match on every copy, else 0.0 ``hardcoded_result`` (the reference plus LIMIT <rows shown> fails).
  At least one copy changes the reference's result as grading compares them (in order only under a top-level
  ORDER BY), so a literal answer cannot match; the relabeled ids fail an id read off the shown rows (``customer_id =
  1`` for "orders of Maria Lopez") or a memorised id list. The prompt shows only some rows, so the task is to write
  the query, not to recite its result.
- The reference is checked before any completion is (``reference_results``, its own bounded call, remembered per
  task): it must run within the bound (on the tables, on the tables less one row for each of at most
  ``MAX_PROBED_ROWS`` rows drawn from every table by the task id, which finds the rows its result depends on, one
  database with the row deleted and restored in turn, and on each copy), return a row with a non-NULL value, and
  have a held-back copy whose result differs. Otherwise the task cannot be scored: valid=False
  ``verifier_error`` (a crafted task through ``flywheel score``), and generation rejects it
  (``reference_problem``). Its cost is never charged to a completion.
- The candidate's check runs in a bounded worker (``verifiers.bounds``: ``LIMITS``); crossing its CPU or wall bound
  is ``timeout``, its memory bound ``too_large``. A broken verifier is valid=False ``verifier_error``. A completion
  over ``MAX_COMPLETION`` characters is ``too_large`` before any pattern runs on it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from flywheel.schemas import Task, Verdict
from flywheel.verifiers import bounds
from flywheel.verifiers.common import batch_rewards, guarded_verify
from flywheel.verifiers.envs.sql import engine, literals, variants

NAME = "sql"
# 1.1: a reference that no held-back copy changes, or that is empty, cannot be scored
# 1.2: every clock read refused at run time ('now' followed by a NUL too; 'localtime'/'utc' modifiers: the
#      machine's time zone; date(), strftime('%Y'), date(char(110,111,119)), ...), no longer a
#      'now' literal; json_each/json_tree allowed; trailing empty statements (';;') ignored; a lone surrogate is a
#      syntax_error (was verifier_error); a write SQLite refuses itself is unsafe
# 1.3: graded on every held-back copy (not only the first that changes the reference's result); the copies
#      relabel id and *_id values one-to-one and drop and clone a row the reference's result depends on, so a
#      hard-coded id (customer_id = 1) or a memorised id list no longer passes; a copy never clones (nor drops at
#      random) the row of an entity the question names, and a dropped row takes the rows that refer to it
#      (customer_id -> customers), so a lookup by name or a LEFT JOIN keeps passing; ids relabeled within
#      1..3*len(ids) (large ids no longer blow memory); at most 40 rows probed, on one database
# 1.4: the integers a copy keeps unrelabeled are those the reference compares with an id column (customer_id = 5,
#      id IN (3, 4)), no longer every integer it writes (LIMIT 1 kept id 1, so customer_id = 1 passed); a pragma_*
#      function's refusal names it (was 'sqlite_master'); a copy finds its protected rows once. Variants (generated
#      tasks change): no clones in tables with unique names, a dropped row's referrers dropped too, rows referred to
#      otherwise never dropped, a sampled name another row holds given back: no duplicate names, no orphans
# 1.5: a copy's clone of a row the result depends on is a new entity (fresh id and text, with the rows that refer to
#      it), and when no copy's result has more rows than the shown one a grown copy (that row cloned into the shown
#      tables) is added, so the reference plus LIMIT <rows shown> fails (it passed 18 of 40 generated tasks); a random
#      clone of an entity row gets fresh text in its unique columns (two airports 'DUB' failed an honest IN lookup);
#      id_literals reads IS, (5), +5, 5 IN (id) and every id inside a BETWEEN of at most 100
# 1.6: a clone's id is drawn at random above the tables' ids and the reference's (entities.fresh_ids), no longer the
#      largest id plus one, so no id read off or past the shown rows names a clone; a row of a table that only
#      refers to others (a loan) names no entity, so a cloned book takes the one loan of the member named and the
#      reference plus LIMIT <rows shown> fails lib-6 too (it passed 1 of 40 generated tasks); relabeled ids spread
#      over 1..10*len(ids) (was 3*), so a memorised id list rarely names a row of a copy
VERSION = "1.6.0"
MAX_CHARS = engine.MAX_SQL
MAX_COMPLETION = 4 * MAX_CHARS  # a query plus the prose around its block
PERTURB_ATTEMPTS = 4
GROWTH_TRIES = 8  # rows tried for a grown copy (variants.grown) when no held-back copy grows the result
MAX_PROBED_ROWS = 40  # rows tried one by one for the reference's dependence on them (probed_rows)
LIMITS = bounds.Limits(cpu_s=4, wall_s=12.0, memory_bytes=1 << 30, warm=("flywheel.verifiers.envs.sql.engine",))
_FENCE = re.compile(r"```[ \t]*(?:(?:sql|sqlite)[ \t]*)?\n(.*?)```", re.S | re.I)  # no two adjacent [ \t]*
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|--[^\n]*|/\*.*?(?:\*/|$)|[();]|\w+|\S",
                     re.S)


class FormatError(ValueError):
    pass


def extract_query(completion: str) -> str:
    blocks = _FENCE.findall(completion)
    if len(blocks) > 1:
        raise FormatError(f"{len(blocks)} code blocks: answer with one query")
    query = (blocks[0] if blocks else completion).strip()
    if not query:
        raise FormatError("no SQL query")
    return query


def _tokens(sql: str) -> list[str]:
    return [t for t in _TOKENS.findall(sql) if not t.startswith(("--", "/*"))]


def statement_count(sql: str) -> int:
    """Statements in ``sql``: ';' outside strings, identifiers and comments, with something after it."""
    count, pending = 0, False
    for token in _tokens(sql):
        if token == ";":
            count += pending
            pending = False
        else:
            pending = True
    return count + pending


def one_statement(sql: str) -> str:
    """``sql`` without the empty statements and comments around its one statement (``SELECT 1;; /* x */ ;``
    runs as ``SELECT 1``); ``sql`` itself when it holds no statement or more than one (SQLite then refuses it)."""
    spans: list[list[int]] = []  # [start, end] of each statement's tokens
    fresh = True
    for match in _TOKENS.finditer(sql):
        token = match.group()
        if token.startswith(("--", "/*")):
            continue
        if token == ";":
            fresh = True
        elif fresh:
            spans.append([match.start(), match.end()])
            fresh = False
        else:
            spans[-1][1] = match.end()
    return sql[spans[0][0]:spans[0][1]] if len(spans) == 1 else sql


def top_level_order_by(sql: str) -> bool:
    depth, previous = 0, ""
    for token in _tokens(sql):
        depth += {"(": 1, ")": -1}.get(token, 0)
        if depth == 0 and previous.upper() == "ORDER" and token.upper() == "BY":
            return True
        previous = token
    return False


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


def sql_reward(completions: list[Any], task: list[Any], **_: Any) -> list[float | None]:
    """TRL reward function (``task`` column); rows of other envs give None."""
    return batch_rewards(NAME, verify, completions, task)
