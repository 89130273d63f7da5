"""Where a math completion states its answer: the ``\\boxed{}`` contents, else the last ``Answer:`` line, else the
one number its last sentence states after a conclusion word (``final_sentence``). Each reader is linear in the
completion's length, so nothing stalls before the bounded worker is reached."""

from __future__ import annotations

import re

from flywheel.verifiers.envs.math.latex import NOT_UNITS, normalize_unicode

# linear: one flat class per run of characters, and the greedy (.*\S) backtracks only over trailing blanks
_ANSWER_LINE = re.compile(r"^[ \t*_#>]*(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(.*\S)[ \t\r]*$", re.I | re.M)
# the last sentence states the answer only after one of these words, and never next to a hedge
_CUES = {"answer", "total", "result", "therefore", "thus", "hence", "so", "finally", "altogether", "overall", "sum",
         "product", "value"}
_SENTENCE_HEDGES = (NOT_UNITS - {"and", "to", "at", "e", "i", "percent", "percentage", "pct"}) | {
    "probably", "likely", "might", "may", "could", "would", "guess", "estimate", "close", "near", "nearest", "within",
    "range", "like", "some", "somewhere", "round", "rounds", "rounded", "rounding", "unsure", "uncertain", "isn",
    "wasn", "aren", "doesn", "don", "didn", "won", "cannot", "can", "never", "instead", "wrong", "incorrect", "check",
    "verify", "wait", "suppose", "assume", "assuming", "try", "possible", "option", "options", "choice", "choices",
    "candidate", "candidates", "unknown", "twice", "thrice", "double", "doubled", "triple", "tripled", "square",
    "cube", "power", "factor", "factors", "multiple", "multiples", "divisor", "divisors", "one", "two", "three",
    "four", "five", "six", "seven", "eight", "nine", "ten", "twenty", "fifth", "fifths", "sixth", "seventh", "eighth",
    "ninth"}
# what may stand right before the number: a word (is, equals:), or a letter and = (x = 25); a $, \( or ** and a sign
# after it. Not an operator, bracket or lone letter: x + 25, x - 25 and (25 - 1) are not 25.
_LEAD = re.compile(r"(?:(?<![A-Za-z])[A-Za-z]\s*=|[A-Za-z]{2,}\s*[:=]?|:)\s*(?:\\?\$|\\\(|\*\*){0,2}\s*"
                   r"([-\u2212]?)\s*$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")  # 25, 2.5, 1,234 (1,2,3 too: a list, which never equals one number)


def _closing_braces(text: str) -> dict[int, int]:
    """The index of the ``}`` that closes each balanced ``{`` (one pass: a stray box cannot make it quadratic)."""
    opened, closing = [], {}
    for i, char in enumerate(text):
        if char == "{":
            opened.append(i)
        elif char == "}" and opened:
            closing[opened.pop()] = i
    return closing


def extract_answers(text: str) -> list[str]:
    """The boxes' contents (an unbalanced box is skipped), else the last answer line's (markdown ``*`` gone)."""
    boxes, i, closing = [], 0, None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        closing = _closing_braces(text) if closing is None else closing
        if m.start() < i or m.end() - 1 not in closing:
            continue
        boxes.append(text[m.end():closing[m.end() - 1]])
        i = closing[m.end() - 1] + 1
    if boxes:
        return boxes
    lines = _ANSWER_LINE.findall(text)
    stated = [line.strip("*_ \t") for line in lines[-1:]] or [final_sentence(text)]
    return [answer for answer in stated if answer]


def final_sentence(text: str) -> str:
    """The answer a completion's last sentence states (``So the answer is 25.``, ``The total is 25 apples.``): from
    its one number (a sign before it kept) to the sentence's end, read like an answer line; '' unless the last line's
    last sentence holds exactly one number (an exponent, as in cm^2, is no number), a conclusion word before it
    (_CUES) and no hedge (_SENTENCE_HEDGES: or, about, at least, not, thousand, ...). Linear: one split, one scan."""
    line = normalize_unicode(text.rstrip().rpartition("\n")[2]).strip(" \t*_#>")
    if "\\boxed" in line or "\\fbox" in line:
        return ""
    sentence = re.split(r"(?<=[.!?])\s+", line)[-1].rstrip("*_ ")
    numbers = [m.start() for m in _NUMBER.finditer(sentence)
               if not sentence[max(0, m.start() - 2):m.start()].endswith(("^", "^{"))]
    if len(numbers) != 1:
        return ""
    before = sentence[:numbers[0]]
    words = set(re.findall(r"[a-z]+", before.lower()))
    lead = _LEAD.search(before[-40:])  # a bounded tail: the anchored search stays linear
    if lead is None or not words & _CUES or words & _SENTENCE_HEDGES:
        return ""
    return ("-" if lead.group(1) else "") + sentence[numbers[0]:].rstrip(". *_")
