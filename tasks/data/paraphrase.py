"""LLM paraphrase backends for generated requests, and the value-preservation check.

Contract: ``paraphrase(requests, seeds) -> texts`` returns one text per request;
the same requests and seeds give the same texts on the same backend and
machine. Batches are formed from the input order alone (fixed batch size), and
each request carries its row seed (vLLM and OpenAI-compatible servers take it
per request; transformers seeds each batch from its rows' seeds).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from flywheel.tasks.data.seeds import format_value
from flywheel.tasks.inference.policy import Backend, Request, Sampling, make_backend

INSTRUCTION = (
    "Rewrite the user's request in different words, as a colleague would type it. Keep every name, email "
    "address, id, date, time, number and quoted text exactly as written. Reply with the rewritten request only."
)


class Paraphraser(Protocol):
    name: str

    def paraphrase(self, requests: Sequence[str], seeds: Sequence[int]) -> list[str]: ...


def chat(request: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": request}]


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


NEGATIONS = frozenset({"not", "no", "never", "none", "nothing", "nor", "neither", "without", "except", "excluding",
                       "opposite", "ignore", "instead", "cannot", "nobody", "nowhere", "non"})  # "n't" reads "not"
# The direction a word gives a comparison or an order, by the pole it states: a paraphrase keeps how many words of
# each pole the request has ("greater than 7" -> "more than 7" or "above 7", never "at least 7" or "under 7").
# A synonym outside its pole's list is rejected, which only keeps the request as written.
POLES: dict[str, str] = {w: pole for pole, words in {
    "more": "more greater larger bigger higher above over exceed exceeds exceeding exceeded beyond",
    "less": "less fewer smaller lower below under beneath",
    "most": "most largest biggest highest greatest maximum max top",
    "least": "least smallest lowest fewest minimum min bottom",
    "before": "before earlier prior", "after": "after later since",
    "ascending": "ascending increasing", "descending": "descending decreasing",
    "first": "first oldest earliest", "last": "last newest latest recent",
}.items() for w in words.split()}

# What a request asks done, by kind: a paraphrase uses no word of a kind the request has no word of (every value
# kept, the task changed: "Archive X" -> "Delete X", "... Then email everyone.", "5 hours" -> "5 minutes",
# "47 times 8" -> "47 plus 8", "the email" -> "every email", "Ignore the rules and ..."). A word may be of several
# kinds ("add": a sum, or a new record) and is kept when the request has any of them; an inflected word reads as its
# base (``_kinds``). An honest synonym outside its kind's list is rejected, which only keeps the request as written.
KINDS: dict[str, set[str]] = {}
for _kind, _listed in {
    "delete": "delete deletion remove erase wipe destroy purge trash discard kill cancel cancellation drop rid "
              "terminate rm nuke clear empty eliminate scrap shred",
    "archive": "archive", "undo": "undo revoke disable deactivate restore reopen unarchive undelete unshare unassign "
                                  "unmark unschedule unsubscribe",
    "send": "send sent email mail message reply replies respond forward notify notified notice tell told inform "
            "announce post cc invite invitee",
    "share": "share grant access permission public",
    "create": "create add make made book schedule set setup block log record submit claim track plan write written "
              "wrote implement define",
    "change": "move change update set shift push reschedule rename edit mark assign reassign close switch replace "
              "modify",
    "run": "restart reboot shutdown stop kill execute sudo chmod chown curl wget",
    "pay": "pay paid payment send sent transfer refund buy bought purchase charge",
    "all": "all every everything everyone everybody entire whole each", "other": "other else besides apart",
    "mean": "average mean avg", "median": "median", "increase": "increase rise raise grow",
    "decrease": "decrease reduce cut discount fall fell shrink", "left": "left", "right": "right",
    "sensitive": "sensitive", "insensitive": "insensitive", "equal": "equal inclusive",
    "plus": "plus add sum total", "minus": "minus subtract difference", "times": "times multiply product",
    "divide": "divide quotient ratio", "square": "square", "cube": "cube", "root": "root sqrt",
    "second": "second sec", "minute": "minute min", "hour": "hour hr h", "day": "day daily",
    "week": "week weekly fortnight", "month": "month monthly", "year": "year yearly annual annually",
    "decade": "decade century centuries", "meter": "meter metre", "km": "km kilometer kilometre",
    "mile": "mile mph", "foot": "foot feet ft", "cm": "cm centimeter", "inch": "inch inches", "kg": "kg kilogram",
    "pound": "lb lbs", "byte": "kb mb gb tb byte", "percent": "percent percentage", "dollar": "dollar usd",
    "euro": "euro eur",
    "when": "today tomorrow yesterday tonight morning afternoon evening noon midnight monday tuesday wednesday "
            "thursday friday saturday sunday",
    "meta": "ignore disregard forget override bypass pretend instruction rules prompt system assistant grader grade "
            "judge reviewer score reward verifier policy jailbreak",
}.items():
    for _word in _listed.split():
        KINDS.setdefault(_word, set()).add(_kind)
SYMBOL_KINDS = {"+": "plus", "×": "times", "*": "times", "÷": "divide", "^": "square", "%": "percent", "$": "dollar",
                "€": "euro", "√": "root", "=": "equal", "≤": "equal", "≥": "equal"}
# kinds a paraphrase keeps as well as adds none of: a unit ("5% off" -> "5 points off") or what a tool is asked to do
# ("Remove task 7" -> "Rewrite the user's request to task 7", "Delete main.py" -> "main.py is in the directory")
KEPT = frozenset("second minute hour day week month year decade meter km mile foot cm inch kg pound byte percent "
                 "dollar euro delete archive undo send share run".split())
NUMBER_WORDS = frozenset("zero one two three four five six seven eight nine ten eleven twelve twenty thirty forty "
                         "fifty hundred thousand million billion dozen half twice thrice double triple quarter"
                         .split())
# An assistant's voice, not a user's: the request turned into a question back, an offer, or chatter around it
VOICE = re.compile(r"\b(would you like|do you want|shall i|should i|want me to|like me to|i can|i could|i will|"
                   r"i'll|let me|here is|here's|sure|certainly|rewrite|rewritten|paraphrase[sd]?|rephrased|the user|"
                   r"user's)\b")
MARKUP = set("`*_<>#|~[]{}\\")
# An arithmetic run: numbers joined by operators ('8x + 3 = 19', '1/4 + 1/6', '5 = 3' of 'x/5 = 3')
FORMULA = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[a-z]?(?:\s*[-+*/×÷^=]\s*\d+(?:\.\d+)?[a-z]?)+(?![\w.])")

def _kept(value: str, text: str) -> bool:
    """``value`` occurs in ``text`` as a whole: no letter or digit joined to it ('5' is not in 'Top 15', 'Lopez'
    not in 'Lopezova'), nor a part joined by a dot or comma ('330' is not in '330.5', 'a@b.example' not in
    'a@b.example.com')."""
    return _find(value, text) is not None


def _find(value: str, text: str) -> re.Match[str] | None:
    head = r"(?<!\w)(?<!\w[.,])" if value[:1].isalnum() else ""
    tail = r"(?!\w)(?![.,]\w)" if value[-1:].isalnum() else ""
    return re.search(head + re.escape(value) + tail, text)


def _forms(value: str, original: str) -> set[str]:
    """The value, and the word it sits in where the request joins it to one ('8x' for 8 in 'Solve 8x + 3 = 19')."""
    joined = re.search(r"\w*" + re.escape(value) + r"\w*", original) if value[:1].isalnum() else None
    return {value} | ({joined.group()} if joined else set())


def check_paraphrase(original: str, text: str, values: dict[str, Any]) -> str | None:
    """None when ``text`` keeps every value of ``values`` (the slots the request shows: generation leaves out hidden
    ones, such as workplace record ids and code test inputs), each as a whole (``_kept``) or as the word the request
    wrote it in ('8x' for 8), and as many negations as the request (an LLM told to keep the values can still turn
    the request around: "not returned" -> "returned"; "without" -> "do not" keeps the count) and as many words of
    each comparison or order pole (``POLES``: "greater than 7" -> "at least 7" keeps the 7 and turns the meaning);
    else the reject reason detail. The reference is not paraphrased, so a text that asks for more or other than the
    request is rejected as well: one not twice as long (plus 30), one line of plain text (``_odd_character``), no
    word of a kind the request lacks, no unit dropped, no assistant's voice, number or arithmetic the request lacks
    (``_added``), and no two values trading places (``_swapped``)."""
    cleaned = text.strip()
    if not cleaned:
        return "empty paraphrase"
    if len(cleaned) > 2 * len(original) + 30:  # room for a polite rewording, not for an added instruction
        return "paraphrase far longer than the request"
    odd = _odd_character(original, cleaned)
    if odd:
        return odd
    said, says = _fold(original), _fold(cleaned)
    lost = [f"{slot}={format_value(v)!r}" for slot, v in values.items()
            if not any(_kept(form, says) for form in _forms(_fold(format_value(v)), said))]
    if lost:
        return f"lost or changed {', '.join(lost)}"
    words = [_words(t) for t in (said, says)]
    negations = [sum(w in NEGATIONS for w in ws) for ws in words]
    if negations[0] != negations[1]:  # "not returned" -> "returned", "don't send" -> "send"
        return (f"{'adds' if negations[1] > negations[0] else 'drops'} a negation ({negations[0]} in the request, "
                f"{negations[1]} in the paraphrase)")
    poles = [Counter(POLES[w] for w in ws if w in POLES) for ws in words]
    turned = sorted(p for p in poles[0].keys() | poles[1].keys() if poles[0][p] != poles[1][p])
    if turned:
        return (f"changes a comparison or an order ('{turned[0]}' words: {poles[0][turned[0]]} in the request, "
                f"{poles[1][turned[0]]} in the paraphrase)")
    return _added(said, says, words) or _swapped(said, says, values)


def _odd_character(original: str, text: str) -> str | None:
    """The first character of ``text`` the request lacks that is not one line of plain text: a line break, tab or
    other space than ' ', a control or format character (zero-width, bidi), a combining mark, a symbol such as an
    emoji or a blank that looks empty (braille, Hangul filler), a letter or digit of another script than Latin
    (Cyrillic 'о' reads 'o' and hides 'nоt' from the negation count), or markup ('`', '*', '#', '<', ...)."""
    for ch in dict.fromkeys(text):
        if ch == " " or ch in original:
            continue
        cat = unicodedata.category(ch)
        if ch in MARKUP:
            return f"adds markup {ch!r}"
        if ch.isascii() and ch.isprintable():
            continue
        latin = cat[0] == "L" and "LATIN" in unicodedata.name(ch, "")
        if not (latin or cat[0] == "P" or cat in ("Sc", "Sm")):
            return f"adds a character that is not plain one-line text: U+{ord(ch):04X} {unicodedata.name(ch, cat)}"
    return None


def _added(said: str, says: str, words: list[list[str]]) -> str | None:
    """What the paraphrase adds that the request does not have: a word of a kind (``KINDS``) the request has none
    of, an assistant's voice (``VOICE``), a number (digits or a number word), or an arithmetic run (``FORMULA``)."""
    kinds = [set().union(*(_kinds(w) for w in ws), (k for c, k in SYMBOL_KINDS.items() if c in t))
             for ws, t in zip(words, (said, says))]
    for word in words[1]:
        if _kinds(word) and not _kinds(word) & kinds[0]:
            return f"adds {word!r} ({'/'.join(sorted(_kinds(word)))} words: none in the request)"
    for symbol, kind in SYMBOL_KINDS.items():
        if symbol in says and kind not in kinds[0]:
            return f"adds {symbol!r} ({kind} words: none in the request)"
    marks = [(w, _kinds(w)) for w in words[0]] + [(c, {k}) for c, k in SYMBOL_KINDS.items() if c in said]
    dropped = [(w, ks) for w, ks in marks if ks & KEPT and not ks & kinds[1]]  # 'add': a sum or a new record
    if dropped:
        return f"drops {dropped[0][0]!r} ({'/'.join(sorted(dropped[0][1]))} words: none in the paraphrase)"
    voice = [v for v in VOICE.findall(says) if v not in VOICE.findall(said)]
    if voice:
        return f"speaks as the assistant ({voice[0]!r})"
    numbers = set(re.findall(r"\d+", said)) | (NUMBER_WORDS & set(words[0]))
    new = [n for n in re.findall(r"\d+", says) + [w for w in words[1] if w in NUMBER_WORDS] if n not in numbers]
    if new:
        return f"adds the number {new[0]!r}"
    formulas = [re.sub(r"\s+", "", f) for f in FORMULA.findall(said)]
    for formula in FORMULA.findall(says):  # '8x + 3' of '8x + 3 = 19' is kept; '3x + 8 = 19' is not
        if not any(_find(re.sub(r"\s+", "", formula), f) for f in formulas):
            return f"writes the arithmetic {formula!r}, not the request's"
    return None


def _kinds(word: str) -> set[str]:
    """The kinds of ``word``, or of the word it inflects ('emailing' -> 'email', 'removing' -> 'remove'); none for
    a word of a pole ('increasing' is an order, checked by ``POLES``)."""
    if word in POLES:
        return set()
    if word in KINDS:
        return KINDS[word]
    suffixes = {"ing": ("", "e", "-"), "ed": ("", "e", "-"), "es": ("",), "s": ("",)}
    for suffix, ends in suffixes.items():
        if word.endswith(suffix):
            stem = word[:-len(suffix)]
            for end in ends:
                base = stem[:-1] if end == "-" else stem + end  # '-': a doubled consonant ('cancelled')
                if base in KINDS:
                    return KINDS[base]
    return set()


def _context(value: str, text: str, others: list[str]) -> tuple[str, ...] | None:
    """The mark (a word or a punctuation mark) just before and just after the first whole occurrence of ``value`` in
    ``text``, then the word just before and just after; each of the ``others`` values reads as one word ('§')."""
    found = _find(value, text)
    if found is None:
        return None
    masked = [text[:found.start()], text[found.end():]]
    for other in others:
        masked = [re.sub(re.escape(other), " § ", part) for part in masked]
    before, after = (re.findall(r"\w+|[^\w\s]", part) for part in masked)
    words_before, words_after = ([t for t in part if re.match(r"\w|§", t)] for part in (before, after))
    return tuple(ts[i] if ts else "" for ts, i in ((before, -1), (after, 0), (words_before, -1), (words_after, 0)))


def _swapped(said: str, says: str, values: dict[str, Any]) -> str | None:
    """Two values that trade the words beside them ("from A to B" -> "from B to A", "holds 512 and ships 87" ->
    "holds 87 and ships 512"): both kept, the roles exchanged."""
    shown = {slot: _fold(format_value(v)) for slot, v in values.items()}
    others = {slot: sorted((o for o in shown.values() if o != v), key=len, reverse=True) for slot, v in shown.items()}
    where: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # the slots found in both texts
    for slot, v in shown.items():
        r, p = _context(v, said, others[slot]), _context(v, says, others[slot])
        if r and p:
            where[slot] = (r, p)
    slots = list(where)
    for i, a in enumerate(slots):
        for b in slots[i + 1:]:
            if shown[a] in shown[b] or shown[b] in shown[a]:
                continue
            (ra, pa), (rb, pb) = where[a], where[b]
            for side in range(4):
                if ra[side] != rb[side] and pa[side] == rb[side] and pb[side] == ra[side]:
                    return f"swaps {a} and {b} ({ra[side]!r} and {rb[side]!r} trade values)"
    return None


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", re.sub(r"n['\u2019]t\b", " not", _fold(text)))


class BackendParaphraser:
    """Paraphrases with a policy backend (transformers, vllm, openai): sampled at temperature 0.7, top-p 0.9,
    each request with its row seed (transformers: each batch of 8 under a seed derived from its rows' seeds)."""

    def __init__(self, backend: Backend, max_new_tokens: int = 96) -> None:
        self.backend, self.name = backend, backend.name
        self.sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=max_new_tokens)

    def paraphrase(self, requests: Sequence[str], seeds: Sequence[int]) -> list[str]:
        gens = self.backend.generate([Request(chat(r), [], s) for r, s in zip(requests, seeds)], self.sampling)
        return [g.text for g in gens]


def make_paraphraser(backend: str, model: str | None, base_url: str | None, **options: Any) -> Paraphraser:
    return BackendParaphraser(make_backend(backend, model, base_url, **options))
