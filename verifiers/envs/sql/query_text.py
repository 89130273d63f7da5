"""The text of a sql completion: its query (the one ```sql block, else the whole completion), its statements
counted outside strings, identifiers and comments, and whether it orders its result at the top level."""

from __future__ import annotations

import re

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
