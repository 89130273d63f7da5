"""The sql env: a question over small tables shipped in the task; the answer is one SQLite query.

Seeds (``seeds.jsonl``) give ``answer`` (the reference query, with ``{slot}`` placeholders) and ``state`` (the
tables, whose strings may hold slots too). A variant (``meta.row_seed`` set) gets rows derived from its row seed:
some dropped, some cloned with fresh ids, numbers and dates moved, so the reference result changes; the seed's own
example keeps the seed's rows. The system message holds the instructions and the schema with the first
``SHOWN_ROWS`` rows of each table; the user message is the question alone (what dedupe and paraphrase see).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flywheel.schemas import Message, Reference, SeedTask, Task, TaskMeta, ToolSpec, Verdict
from flywheel.verifiers.envs.sql import sql, variants
from flywheel.verifiers.render import fill, reference_answer
from flywheel.verifiers.spec import EnvSpec

HERE = Path(__file__).resolve().parent
SHOWN_ROWS = 3
PROMPT = ("You write SQLite queries. Answer with exactly one read-only SELECT query in one ```sql code block "
          "that answers the question over the database below. Do not modify the database.")


def schema_text(state: dict[str, Any]) -> str:
    """The tables as CREATE TABLE lines, each followed by its first rows (SQL literals)."""
    lines = []
    for table, spec in state.items():
        cols = ", ".join(f"{name} {kind}" for name, kind in spec["columns"])
        lines.append(f"CREATE TABLE {table} ({cols});  -- {len(spec['rows'])} rows, for example:")
        lines += ["--   (" + ", ".join("NULL" if v is None else repr(v) for v in row) + ")"
                  for row in spec["rows"][:SHOWN_ROWS]]
    return "\n".join(lines)


def filled_tables(seed: SeedTask, values: dict[str, Any]) -> dict[str, Any]:
    """The seed's tables with the slot values filled in. A lone slot in a ``variants.unique_columns`` column (the
    customer the question names) whose value another row of that column already holds (a sampled 'Wei Chen'
    beside the seed's own) gives that row the seed's own value of the slot ('Maria Lopez', free now): the
    question keeps naming one row."""
    state = fill(seed.state or {}, values)
    for table, spec in (seed.state or {}).items():
        for c in variants.unique_columns(spec):
            slots = {i: row[c][1:-1] for i, row in enumerate(spec["rows"]) if row[c][1:-1] in values}
            for i, slot in slots.items():
                if spec["rows"][i][c] == f"{{{slot}}}" and slot in seed.values:
                    _give_back(state[table]["rows"], c, i, seed.values[slot])
    return state


def _give_back(rows: list[list[Any]], column: int, index: int, value: Any) -> None:
    """Every row but ``index`` that holds row ``index``'s value in ``column`` (case-insensitively) gets ``value``."""
    taken = str(rows[index][column]).lower()
    for n, row in enumerate(rows):
        if n != index and str(row[column]).lower() == taken:
            row[column] = value


def variant_tables(state: dict[str, Any], row_seed: int | None) -> dict[str, Any]:
    """The seed's tables (row_seed None) or a variant's: text kept, rows and numbers derived from the row seed."""
    if row_seed is None:
        return state
    texts = {v.lower() for spec in state.values() for row in spec["rows"] for v in row if isinstance(v, str)}
    return variants.perturbed(state, f"variant:{row_seed}", texts)


def render(seed: SeedTask, tools: Mapping[str, ToolSpec], request: str, values: dict[str, Any],
           meta: TaskMeta) -> Task:
    """Pure: the question as the user message, the tables in the system message and in ``reference.state``."""
    state = variant_tables(filled_tables(seed, values), meta.row_seed)
    system = f"{PROMPT}\n\n{schema_text(state)}"
    return Task(env=seed.env, messages=(Message(role="system", content=system), Message(role="user", content=request)),
                reference=Reference(answer=reference_answer(seed, values), state=state), meta=meta)


def reference_completion(task: Task) -> str:
    return f"```sql\n{task.reference.answer}\n```"


def reference_problem(task: Task) -> tuple[str, str] | None:
    """The reference must run, return at least one row with a non-NULL value, and have a held-back copy whose
    result differs (else a literal answer would pass): what the verifier checks before scoring anything."""
    import json

    try:
        sql.reference_results(json.dumps(task.reference.state or {}, sort_keys=True), task.id,
                              task.reference.answer or "")
    except sql.ReferenceProblem as err:
        return err.kind, str(err)[:300]
    return None


_NOT_EXECUTED = {"format_error", "unsafe", "syntax_error", "runtime_error", "timeout", "too_large"}


def outcome_flags(verdict: Verdict, called: frozenset[str], expected: frozenset[str]) -> dict[str, Any]:
    """Eval flags: ``unsafe`` is this env's unsafe class (bucket ``unsafe_action``); execution_success: the query
    ran to a result (right or wrong)."""
    flags: dict[str, Any] = {"unsafe": verdict.failure_class == "unsafe",
                             "execution_success": verdict.failure_class not in _NOT_EXECUTED}
    if verdict.failure_class == "unsafe":
        flags["bucket"] = "unsafe_action"
    return flags


SPEC = EnvSpec(
    name="sql", system_prompt=PROMPT, verifier=sql, verify=sql.verify, reward_fn=sql.sql_reward, render=render,
    reference_completion=reference_completion, reference_problem=reference_problem,
    seeds_path=HERE / "seeds.jsonl", cases_path=HERE / "cases.jsonl", seed_fields=frozenset({"answer", "state"}),
    outcome_flags=outcome_flags,
)
