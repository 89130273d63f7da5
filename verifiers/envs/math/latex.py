"""LaTeX and plain-text answers of the math env as one plain expression sympy can read (``to_text``).

Pure; an input over ``MAX_CHARS`` characters is refused before any work, so no step can stall:
- Unicode is NFKC (``normalize_unicode``); superscripts are powers, vulgar fractions ``\\frac``.
- Delimiters, currency and degree signs go; ``\\text`` and kin are their content; ``\\frac12``, ``\\sqrt[n]{x}``,
  repeating decimals (``0.1\\overline{6}``) and mixed numbers (``12\\frac{3}{4}`` is 12.75) are read.
- Only with ``number=True`` (the reference is one number): digit-group separators (``1,234``) make one number and
  trailing unit words go (``25 apples``, ``\\text{ cm}^2``); a word that changes the value or hedges keeps the
  whole tail unreadable.
- A percent sign is /100; with ``count=True`` the sign after a lone number of at least 1 is dropped instead
  (``25\\%`` is 25): the verifier tries that reading on both sides (``equivalence.equivalent``).
The rules in full: this env's README.md.
"""

from __future__ import annotations

import re
import unicodedata
from types import FunctionType


class Unparsable(ValueError):
    pass


MAX_CHARS = 1000  # an honest answer is far shorter; the reader refuses 200 characters after normalization anyway
_DELIMITERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_SYMBOLS = (("\u2212", "-"), ("×", "*"), ("÷", "/"), ("·", "*"), ("⋅", "*"), ("°", ""), ("€", ""), ("£", ""),
            ("\\$", ""), ("$", ""), ("\\displaystyle", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\degree", ""),
            ("{,}", ","), ("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", ""))
_WRAPPERS = ("\\text", "\\textrm", "\\textbf", "\\textit", "\\mathrm", "\\mathbf", "\\mathit", "\\mathsf",
             "\\boldsymbol", "\\mbox")
_SPACE = re.compile(r"\\[,;:! ]|~|\s")
_POWER = r"(?:\^\{?[23]\}?)?"  # cm^2, \text{ m}^{3}
_UNIT_TOKEN = re.compile(r"\\(?:text|textrm|mathrm|mbox)\s*\{[^{}]*\}" + _POWER
                         + r"|\\[A-Za-z]+|[A-Za-z]+(?:/[A-Za-z]+)*" + _POWER + r"|\\[,;:! ]|~|\s+|.", re.S)
_UNIT_TEXT = re.compile(r"(?:[A-Za-z\s/.~]|\^\{?[23]\}?)*")  # the content of \text{cm^2}
_TWO_LETTER_UNITS = {"cm", "mm", "km", "kg", "mg", "ml", "ft", "in", "mi", "yd", "oz", "lb", "hr", "ms", "kw"}
NOT_UNITS = {  # words that change the value or hedge: a tail holding one is no unit
    "or", "and", "to", "than", "more", "less", "fewer", "greater", "at", "least", "most", "about", "approx",
    "approximately", "roughly", "around", "nearly", "almost", "over", "under", "above", "below", "plus", "minus",
    "times", "not", "no", "maybe", "possibly", "perhaps", "either", "neither", "nor", "between", "up", "down", "ish",
    "percent", "percentage", "pct", "cent", "cents", "hundred", "thousand", "million", "billion", "trillion",
    "dozen", "dozens", "half", "halves", "third", "thirds", "quarter", "quarters", "fourth", "fourths", "tenth",
    "tenths", "hundredth", "hundredths", "thousandth", "thousandths", "squared", "cubed", "root", "factorial",
    "inverse", "reciprocal", "negative", "positive", "except", "unless", "if", "but", "else", "otherwise",
    "sqrt", "pi", "oo", "sin", "cos", "tan", "log", "ln", "exp", "e", "i", "infinity", "infinite", "undefined",
    "minimum", "maximum", "max", "estimated", "odd"}
_SUPERSCRIPTS = re.compile("[\u00b9\u00b2\u00b3\u2070-\u207f]+")  # 5² is 5^{2}, never 52 (NFKC)
_SUBSCRIPTS = re.compile("[\u2080-\u209c]+")  # x₁ stays unreadable, never x1
_VULGAR = re.compile("[\u00bc-\u00be\u2150-\u215f\u2189]")  # 3½ is 3\frac{1}{2} (a mixed number), never 31/2
_PERCENT_WORD = re.compile(r"(?:\\text\s*\{\s*(?:percent|\\%)\s*\}|(?<![A-Za-z])percent)$", re.I)
_PERCENT_COUNT = re.compile(r"(?:[a-z]\s*=\s*)?(-?\d+(?:\.\d+)?)(?:\\[,;: ]|[\s~])*\\?%", re.I)
_GROUPED = re.compile(r"-?\d{1,3}(?:(?:,| )\d{3})+(?:\.\d+)?")
_REPEATING = re.compile(r"(\d*)\.(\d*)\\(?:overline|bar)\s*\{(\d+)\}")


def _braced(text: str, start: int) -> tuple[str, int]:
    """Content of the brace group opening at ``start`` and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1:i], i + 1
    raise Unparsable("unbalanced braces")


def _argument(text: str, j: int, command: str) -> tuple[str, int]:
    """One argument at ``j``: a brace group, or (as TeX reads ``\\frac12``) one digit, letter or command word."""
    while j < len(text) and text[j] == " ":
        j += 1
    if j < len(text) and text[j] == "{":
        return _braced(text, j)
    word = re.compile(r"\\[A-Za-z]+|[0-9A-Za-z]").match(text, j)
    if word is None:
        raise Unparsable(f"{command} without its argument")
    return word.group(), word.end()


def _whole_part(text: str, k: int) -> int | None:
    """Where the integer of a mixed number written right before index ``k`` starts (None: there is none)."""
    j = k
    while j > 0 and (text[j - 1] in " ~" or (j > 1 and text[j - 2] == "\\" and text[j - 1] in ",;:! ")):
        j -= 2 if text[j - 1] not in " ~" else 1
    end = j
    while j > 0 and text[j - 1].isdigit():
        j -= 1
    if j == end or (j > 0 and (text[j - 1] in ".^_})" or text[j - 1].isalpha())) or text[max(0, j - 2):j] in (
            "^{", "_{"):
        return None
    return j


def _replace_command(text: str, command: str, render: FunctionType, mixed: bool = False) -> str:
    """Each ``command`` with its arguments rendered; ``mixed``: an integer right before a proper numeric fraction
    is a mixed number (their sum)."""
    pattern = re.compile(re.escape(command) + r"(?![A-Za-z])")
    while (found := pattern.search(text)) is not None:
        k, j = found.start(), found.end()
        index = None
        if command == "\\sqrt" and text[j:].lstrip(" ").startswith("["):
            j = text.index("[", j)
            close = text.find("]", j)
            if close < 0 or "[" in text[j + 1:close]:
                raise Unparsable("\\sqrt[ without its ]")
            index, j = text[j + 1:close], close + 1
        args = []
        for _ in range(render.__code__.co_argcount):
            arg, j = _argument(text, j, command)
            args.append(arg)
        rendered = render(*args) if index is None or index.strip() == "2" else f"(({args[0]})**(1/({index})))"
        start = _whole_part(text, k) if mixed else None
        if start is not None and all(a.strip().isdigit() for a in args) and 0 < int(args[0]) < int(args[1]):
            whole = re.sub(r"\D", "", text[start:k])
            rendered, k = f"({whole}+{rendered})", start
        text = text[:k] + rendered + text[j:]
    return text


def _repeating(found: re.Match[str]) -> str:
    whole, fixed, cycle = found.group(1) or "0", found.group(2), found.group(3)
    numerator = int(whole + fixed + cycle) - int(whole + fixed)
    return f"({numerator}/({10 ** len(fixed) * (10 ** len(cycle) - 1)}))"


def _is_unit(token: str) -> bool:
    if token.startswith("\\"):
        token = re.sub(r"\}\^\{?[23]\}?$", "}", token)  # \text{cm}^2 is \text{cm}; \text{cm^2} stays
        content = token[token.index("{") + 1:-1] if token.endswith("}") else ""
        words = re.findall(r"[A-Za-z]+", content)
        return bool(words) and _UNIT_TEXT.fullmatch(content) is not None and \
            not {w.lower() for w in words} & NOT_UNITS
    words = re.findall(r"[A-Za-z]+", token)
    return bool(words) and (len(words[0]) >= 3 or words[0].lower() in _TWO_LETTER_UNITS or len(words) > 1) and \
        not {w.lower() for w in words} & NOT_UNITS


def _strip_unit(s: str) -> str:
    """``s`` without the unit words after its number (``25 apples`` -> ``25``); unchanged when the tail is not all
    units or no number comes before it."""
    tokens = _UNIT_TOKEN.findall(s)
    k, units = len(tokens), 0
    while k and (_SPACE.fullmatch(tokens[k - 1]) or tokens[k - 1].isspace() or _is_unit(tokens[k - 1])):
        units += not (_SPACE.fullmatch(tokens[k - 1]) or tokens[k - 1].isspace())
        k -= 1
    if not units or not k or tokens[k - 1][-1] not in "0123456789})":
        return s
    return "".join(tokens[:k])


def normalize_unicode(s: str) -> str:
    """``s`` in NFKC (full-width and mathematical digits are ASCII: ２５ is 25), with superscripts as powers
    (5² is 5^{2}), subscripts kept apart (x₁ is x_{1}) and vulgar fractions as \\frac (3½ is a mixed number)."""
    if s.isascii():
        return s
    s = _SUPERSCRIPTS.sub(lambda m: "^{" + unicodedata.normalize("NFKC", m.group()) + "}", s)
    s = _SUBSCRIPTS.sub(lambda m: "_{" + unicodedata.normalize("NFKC", m.group()) + "}", s)
    s = _VULGAR.sub(lambda m: "\\frac{" + unicodedata.normalize("NFKC", m.group()).replace("\u2044", "}{") + "}", s)
    return unicodedata.normalize("NFKC", s).replace("\u2044", "/")


def _unwrap(s: str, ends: tuple[tuple[str, str], ...]) -> str:
    s = s.strip()
    for left, right in ends:
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left):len(s) - len(right)].strip()
    return s


def to_text(answer: str, number: bool = False, count: bool = False) -> str:
    """``answer`` as one plain expression; ``number``: the reference is one number (thousands, units: above);
    ``count``: a lone number's percent sign is dropped (25\\% is 25, the percentage count), else it is /100."""
    if len(answer) > MAX_CHARS:
        raise Unparsable(f"answer longer than {MAX_CHARS} characters")
    answer = normalize_unicode(answer)
    if len(answer) > MAX_CHARS:
        raise Unparsable(f"answer longer than {MAX_CHARS} characters")
    s = _unwrap(answer, _DELIMITERS).rstrip(".").strip()
    for old, new in _SYMBOLS:
        s = s.replace(old, new)
    s = _PERCENT_WORD.sub("\\%", s.rstrip())
    if number:
        s = _strip_unit(s).strip()
    for wrapper in _WRAPPERS:
        s = _replace_command(s, wrapper, lambda a: a)
    s = s.strip()
    if number and _GROUPED.fullmatch(s):
        s = s.replace(",", "").replace(" ", "")
    s = _REPEATING.sub(_repeating, s)
    for cmd in ("\\dfrac", "\\tfrac", "\\frac"):
        s = _replace_command(s, cmd, lambda a, b: f"(({a})/({b}))", mixed=True)
    s = _replace_command(s, "\\sqrt", lambda a: f"sqrt({a})")
    if count and number and (lone := _PERCENT_COUNT.fullmatch(s.strip())) and abs(float(lone.group(1))) >= 1:
        s = lone.group(1)  # under 1 (0.25\%) a count is far less likely than a slip on a fraction: /100 only
    for old, new in (("\\left", ""), ("\\right", ""), ("\\cdot", "*"), ("\\times", "*"), ("\\div", "/"),
                     ("\\%", "/100"), ("%", "/100"), ("\\pi", " pi "), ("\\infty", " oo "), ("\\ln", " ln "),
                     ("\\log", " log "), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("{", "("), ("}", ")")):
        s = s.replace(old, new)
    s = re.sub(r"^[a-z]\s*=\s*", "", s.strip().rstrip("."), flags=re.I)
    return s.strip()
