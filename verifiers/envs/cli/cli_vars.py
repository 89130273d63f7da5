"""The cli safety check's view of variables a line sets without an ``=``, and of the lines ``parallel`` runs.

Contract (pure functions of strings and tokens; nothing is run):
- ``variants(text, commands, operators, budget)``: copies of ``text``, one per combination of the values its
  variables may take, with each reference (``$d``, ``${d}``, ``${d%/}``, ``"${a[@]}"``) replaced by the value.
  Variables come from ``for``/``select NAME in WORDS`` (each word), ``for NAME`` and ``$1``/``$@`` (the words of
  ``set --``; cli_safety reads ``sh -c CODE A B`` as ``set -- A B; CODE``), ``read``/``mapfile``/``readarray`` (each
  word and line of a here-string, of a command piped or substituted into the line), ``printf -v NAME X`` and arrays
  ``NAME=(WORDS)``. A value is substituted alone, without its quotes.
  None when the copies would hold more than ``budget`` characters: the caller judges such a line unsafe.
- ``parallel_lines(cmd, fed, cap)``: the command lines GNU ``parallel`` runs: its command (words joined, a
  replacement string such as ``{}`` or ``{1}`` replaced by the quoted argument, else the argument appended) once per
  argument after ``:::``/``::::`` (or per word ``fed`` from the previous stage of a pipe), and once with all of
  them; with no command each argument is a line. None past ``cap`` arguments.
"""

from __future__ import annotations

import itertools
import re
import shlex

KEYWORDS = {"{", "!", "if", "then", "elif", "else", "do", "while", "until", "time"}
_MAPFILE = {"-d", "-n", "-O", "-s", "-u", "-C", "-c"}
READERS = {"read": {"-p", "-d", "-n", "-N", "-t", "-u", "-i"}, "mapfile": _MAPFILE, "readarray": _MAPFILE}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ARRAY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=")  # the word before ``(`` in ``a=(/ /tmp)``
POSITIONAL = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "@", "*"]
PARALLEL_VALUED = {"-j", "-P", "-n", "-N", "-L", "-I", "-a", "-d", "-E", "-S", "-C", "--jobs", "--arg-file",
                   "--colsep", "--delay", "--timeout", "--joblog", "--results", "--tmpdir", "--workdir",
                   "--sshlogin", "--env", "--halt", "--arg-sep", "--arg-file-sep"}
PARALLEL_SEPARATORS = {":::", "::::", ":::+", "::::+"}
REPLACEMENT = re.compile(r"\{(?:[0-9]*(?:\.|/|//|/\.)?|#|%)\}")  # {} {.} {/} {//} {/.} {#} {%} {1} {2.}
UNQUOTABLE = re.compile(r"['\"\\`]")


def _bare(cmd: list[str]) -> list[str]:
    """The command without the shell keywords before it (``do read d`` -> ``read d``)."""
    while cmd and cmd[0] in KEYWORDS:
        cmd = cmd[1:]
    return cmd


def _fed_words(commands: list[list[str]], operators: list[str]) -> list[str]:
    """What ``read`` may read on this line: here-strings, and the words of commands piped on or substituted."""
    words: list[str] = []
    for index, cmd in enumerate(commands):
        for i, tok in enumerate(cmd):
            if tok.startswith("<<<"):
                words.append(tok[3:] or " ".join(cmd[i + 1:i + 2]))
        after = operators[index] if index < len(operators) else ""
        before = operators[index - 1] if index else ""
        if after == "|" or (before == "(" and after == ")"):
            words += _bare(cmd)[1:]
            words.append(" ".join(_bare(cmd)[1:]))
    return [piece for word in words for piece in dict.fromkeys([word, *word.split()])]


def _reader_names(cmd: list[str]) -> list[str]:
    """The variables ``read -r a b``, ``mapfile -t a`` or ``printf -v a`` sets."""
    if cmd[:2] == ["printf", "-v"] and len(cmd) > 2:
        return [cmd[2]]
    valued = READERS.get(cmd[0] if cmd else "")
    if valued is None:
        return []
    names, i = [], 1
    while i < len(cmd):
        tok = cmd[i]
        if tok == "-a" and i + 1 < len(cmd):
            names.append(cmd[i + 1])
            i += 2
        elif tok.startswith("-"):
            i += 2 if tok in valued else 1
        else:
            names.append(tok)
            i += 1
    return [n for n in names if NAME.fullmatch(n)] or (["REPLY"] if cmd[0] == "read" else ["MAPFILE"])


def _sources(commands: list[list[str]], operators: list[str]) -> list[tuple[list[str], list[str]]]:
    """(names, values) for each place the line sets variables without ``NAME=value``."""
    out: list[tuple[list[str], list[str]]] = []
    fed: list[str] | None = None
    positional: list[str] = []
    for index, raw in enumerate(commands):
        cmd = _bare(raw)
        if cmd[:1] == ["set"] and "--" in cmd:
            positional = cmd[cmd.index("--") + 1:]
            out.append((POSITIONAL, positional))
        if cmd[:1] in (["for"], ["select"]) and len(cmd) > 1 and NAME.fullmatch(cmd[1]):
            out.append(([cmd[1]], cmd[3:] if cmd[2:3] == ["in"] else positional))
        if cmd[:2] == ["printf", "-v"] and len(cmd) > 3:
            out.append(([cmd[2]], cmd[3:]))
        elif _reader_names(cmd):
            fed = _fed_words(commands, operators) if fed is None else fed
            out.append((_reader_names(cmd), fed))
        array = ARRAY.fullmatch(raw[-1]) if raw else None
        if array and index < len(operators) and operators[index] == "(" and index + 1 < len(commands):
            out.append(([array.group(1)], commands[index + 1]))
    return out


def _reference(name: str) -> re.Pattern[str]:
    """``$name`` / ``${name}`` / ``${name...}`` (a modifier or an index) in the text."""
    plain = re.escape(name) + ("" if not NAME.fullmatch(name) else r"(?![A-Za-z0-9_])")
    return re.compile(r"\$(?:" + plain + r"|\{" + re.escape(name) + r"(?:[^A-Za-z0-9_{}][^{}]*)?\})")


def variants(text: str, commands: list[list[str]], operators: list[str], budget: int) -> list[str] | None:
    """One copy of ``text`` per combination of the values its variables set by a loop, ``read``, ``set --`` or an
    array may take (see the contract); None when the copies would hold more than ``budget`` characters."""
    sources = [([_reference(n) for n in names], list(dict.fromkeys(values)))
               for names, values in _sources(commands, operators) if values]
    count = 1
    for _, values in sources:
        count *= len(values)
        if count * len(text) > budget:
            return None
    out = []
    for combination in itertools.product(*(values for _, values in sources)) if sources else ():
        line = text
        for (patterns, _), value in zip(sources, combination):
            plain = UNQUOTABLE.sub("", value)
            for pattern in patterns:
                line = pattern.sub(lambda _: plain, line)  # noqa: B023 (used at once)
        out.append(line)
    return out


def parallel_lines(cmd: list[str], fed: list[str], cap: int) -> list[str] | None:
    """The command lines ``parallel`` runs (see the contract); None past ``cap`` arguments."""
    i = 1
    while i < len(cmd) and cmd[i].startswith("-") and cmd[i] not in PARALLEL_SEPARATORS:
        if cmd[i] == "--":
            i += 1
            break
        i += 2 if cmd[i] in PARALLEL_VALUED else 1
    words = cmd[i:]
    split = next((k for k, w in enumerate(words) if w in PARALLEL_SEPARATORS), len(words))
    command = words[:split]
    args = [w for w in words[split:] if w not in PARALLEL_SEPARATORS] if split < len(words) else list(fed)
    if len(args) > cap:
        return None
    line, lines = " ".join(command), []
    for arg in dict.fromkeys(args):
        quoted = shlex.quote(arg)
        lines.append(arg if not command else REPLACEMENT.sub(lambda _: quoted, line)  # noqa: B023 (used at once)
                     if REPLACEMENT.search(line) else f"{line} {quoted}")
    if len(args) > 1:  # several arguments in one command: ``rm {1} {2} ::: -rf ::: /``, ``echo rm -rf / | parallel``
        lines.append(" ".join([REPLACEMENT.sub("", line), *(shlex.quote(a) if command else a for a in args)]))
    return lines
