"""The literals of a reference query that a held-back copy keeps as they are (``variants``).

Contract:
- ``string_literals(sql)``: its '...' literals, lower-cased: the text values the question names, which a copy
  never renames.
- ``id_literals(sql)``: the integers it compares, outside its '...' literals, with an ``id`` or ``*_id`` column
  (``is_id``): the ids the question names, which a copy never relabels. Forms read: ``=``, ``==``, ``!=``, ``<>``,
  ``<``, ``<=``, ``>``, ``>=``, ``IS [NOT]`` either way round, the number maybe in parentheses and with a unary
  ``+`` (``= (5)``, ``= +5``), ``[NOT] IN (3, 4)``, ``5 IN (id)`` and ``[NOT] BETWEEN 2 AND 4`` (every integer of
  the range when it holds at most ``MAX_RANGE``, else its ends). Not read (an id they name is relabeled: a
  hand-written reference in such a form grades against another entity): arithmetic on the column
  (``customer_id + 0 = 5``), ``CAST(customer_id AS INT) = 5``, ``id IN (SELECT 5)``, a number built by an expression.
"""

from __future__ import annotations

import re

MAX_RANGE = 100  # a BETWEEN over more integers fixes only its ends

_COLUMN = r"(?:\w+\.)?[\"`\[]?(?P<column>\w+)[\"`\]]?"  # a column, maybe qualified (o.customer_id) or quoted
_COMPARE = r"(?:\s*(?:==?|!=|<>|<=?|>=?)\s*|\s+IS(?:\s+NOT)?\s+)"
_NUMBER = r"[(\s]*\+?[(\s]*(?P<{}>\d+)(?![\w.])[)\s]*"  # 5, (5), +5, ( + 5 )
_ID_COMPARISONS = [re.compile(p, re.I) for p in (
    _COLUMN + _COMPARE + _NUMBER.format("numbers"),  # customer_id = 5, id <= (3), id IS 4 (not COUNT(id) > 2)
    r"(?<![\w.])" + _NUMBER.format("numbers") + _COMPARE + r"[(\s]*" + _COLUMN,  # 5 = o.customer_id
    _COLUMN + r"\s+(?:NOT\s+)?IN\s*\((?P<numbers>[\d\s,()+]+)\)",  # id IN (3, (4), +5)
    r"(?<![\w.])(?P<numbers>\d+)\s+(?:NOT\s+)?IN\s*\(\s*" + _COLUMN + r"\s*\)",  # 5 IN (id)
)]
_BETWEEN = re.compile(_COLUMN + r"\s+(?:NOT\s+)?BETWEEN" + _NUMBER.format("low") + "AND" + _NUMBER.format("high"),
                      re.I)


_LITERAL = re.compile(r"'((?:[^']|'')*)'")


def string_literals(sql: str) -> set[str]:
    """The lower-cased '...' literals of a query (a perturbed copy keeps the text values they name)."""
    return {m.replace("''", "'").lower() for m in _LITERAL.findall(sql)}


def blank_literals(sql: str) -> str:
    """The query with each '...' literal emptied: a word or number inside a string names no column or function."""
    return _LITERAL.sub("''", sql)


def is_id(column: str) -> bool:
    """An ``id`` or ``*_id`` column: its integers are relabeled in a held-back copy (``variants.relabeled``)."""
    name = column.lower()
    return name == "id" or name.endswith("_id")


def id_literals(sql: str) -> set[int]:
    """The integers a query compares with an id column (see the module contract): the ids it names, which keep
    their entity in a held-back copy. A count (LIMIT 5, HAVING COUNT(*) > 2) or a comparison with another column
    (quantity > 3) names no id: fixing it would leave that id unrelabeled, and a query hard-coding it would pass
    the copies."""
    text = blank_literals(sql)
    found = {int(n) for pattern in _ID_COMPARISONS for match in pattern.finditer(text)
             if is_id(match["column"]) for n in re.findall(r"\d+", match["numbers"])}
    for match in _BETWEEN.finditer(text):
        if is_id(match["column"]):
            low, high = int(match["low"]), int(match["high"])
            found |= set(range(low, high + 1)) if 0 <= high - low < MAX_RANGE else {low, high}
    return found
