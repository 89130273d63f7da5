"""JSONL input and output at the CLI's edge: lines read as bytes and parsed strictly (orjson), outputs
written atomically, malformed lines reported (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape

from flywheel.flows.cli.base import err, explain, fail
from flywheel.schemas.records import strict_json


def read_jsonl(path: Path) -> list[tuple[int, bytes]]:
    """The non-blank lines with their numbers, as bytes: each is decoded on its own, so one line that is not
    UTF-8 is a malformed line (exit 2) and the others are still processed."""
    if not path.exists():
        fail(f"--input {path} does not exist")
    if not path.is_file():
        fail(f"--input {path} is not a file; name a JSONL file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        fail(f"cannot read --input {path}: {exc.strerror or exc}")
    rows = [(i, line) for i, line in enumerate(data.splitlines(), start=1) if line.strip()]
    if not rows:
        fail(f"--input {path} has no lines (empty or blank): nothing to process; name the JSONL file with the rows")
    return rows


def parse_line(line: bytes) -> Any:
    """One JSONL line as strict JSON (RFC 8259 in UTF-8, no duplicate keys); ValueError with what is wrong and how
    to fix it (``schemas.records.strict_json``, which ``flywheel ingest`` uses too)."""
    return strict_json(line)


def write_atomic(path: Path, lines: list[str]) -> None:
    from flywheel.tasks.files import OutputError, write_text_atomic

    try:
        write_text_atomic(path, "".join(lines))
    except OutputError as exc:  # a device, FIFO, folder or full disk: one line, the target untouched
        fail(explain(exc))


def report_bad(bad: list[str], total: int) -> None:
    for line in bad[:20]:
        err.print(f"[yellow]{escape(line)}[/yellow]", highlight=False, soft_wrap=True)  # one line each, unwrapped
    if bad:
        fail(f"{len(bad)} of {total} input lines malformed (listed above; the others were processed)", code=2)

