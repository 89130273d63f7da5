"""The cli verifier's honest equivalents: spellings that run the same command, made one before cli_match compares.

Contract (pure functions of the tokens of one command of known grammar; see cli_match):
- ``--`` (end of options) is dropped when no argument after it starts with ``-`` (``grep -c -- ERROR f`` is
  ``grep -c ERROR f``), except for git (``git checkout -- x`` names a file, ``git checkout x`` a branch) and ps.
- ``./x`` is ``x`` for the file operands of ``DOT_PATHS`` commands, which neither print nor store the name as
  written (``ls``, ``du``, ``wc``, ``grep`` print it, ``tar``/``zip`` store it, so they keep it); never where the
  rest would start with ``-`` (``rm ./-f`` is not ``rm -f``) or holds a ``:`` (``scp ./a:b`` is a local file).
- chmod's symbolic mode: clauses with ``ugo`` are ``a``; a clause without who, adding or removing only ``r``, ``x``
  or ``X``, is ``a`` too: under the default umask (022 or 002: neither masks a read or execute bit) ``chmod +x f``
  is ``chmod a+x f``. ``+w``, ``=``, ``s``, ``t`` depend on the umask or the file and stay as written.
- ``git switch -c B`` / ``-C`` / ``--create`` is ``git checkout -b B`` / ``-B`` (only with options both share).
- ``systemctl VERB x.service`` is ``systemctl VERB x`` (systemctl adds ``.service`` to a name without a unit type).
- a filter reading one file (``FILTERS``) with no file operand and one input redirection and no other reads it as
  its operand: ``head -n 10 < f`` is ``head -n 10 f`` (cli_match also reads ``cat f | head`` so).
"""

from __future__ import annotations

import re

DOT_PATHS = {"rm", "cp", "mv", "ln", "mkdir", "touch", "cat", "head", "tail", "sort", "uniq", "cut", "gzip", "chmod",
             "chown"}
NO_DASH_DASH = ("git ", "ps")
FILTERS = {"head", "tail", "cat", "sort", "uniq", "cut"}
FOLLOW = {"-f", "-F", "--follow", "--retry"}  # tail -f < f follows stdin, not the file's name
MODE = re.compile(r"[ugoa]*[-+=][rwxXst]*(?:[-+=][rwxXst]*)*(?:,[ugoa]*[-+=][rwxXst]*(?:[-+=][rwxXst]*)*)*")
CLAUSE = re.compile(r"([ugoa]*)(?:([-+])([rwxXst]+)|([-+=].*))")
UNIT_TYPES = (".service", ".socket", ".target", ".timer", ".mount", ".automount", ".swap", ".path", ".slice",
              ".scope", ".device")
SWITCH = {"-c": "-b", "--create": "-b", "-C": "-B", "--force-create": "-B", "-t": "-t", "--track": "--track",
          "--no-track": "--no-track", "-q": "-q", "--quiet": "-q", "-m": "-m", "--merge": "-m", "-f": "-f",
          "--discard-changes": "-f", "--force": "-f"}


def switch_as_checkout(cmd: list[str]) -> list[str]:
    """``git switch -c B [START]`` as ``git checkout -b B [START]``; any other git switch unchanged."""
    if cmd[:2] != ["git", "switch"]:
        return cmd
    words = [w for t in cmd[2:] for w in (t.split("=", 1) if t.startswith("--create=") else [t])]
    options = [w for w in words if w.startswith("-")]
    if not options or not all(w in SWITCH for w in options) or not {"-c", "--create", "-C", "--force-create"} & set(
            options):
        return cmd
    return ["git", "checkout", *(SWITCH.get(w, w) for w in words)]


def split_mode(words: list[str]) -> tuple[str | None, list[str]]:
    """chmod's mode word (``-x`` is a mode, not an option) and the other words."""
    for i, word in enumerate(words):
        if word == "--":
            break
        if MODE.fullmatch(word) or word.isdigit():
            return (word if word.isdigit() else _mode(word)), words[:i] + words[i + 1:]
        if not word.startswith("-"):
            break
    return None, words


def _mode(mode: str) -> str:
    """A symbolic mode with ``ugo`` as ``a`` and a who-less ``+x``/``-r``/``+rX`` as ``a`` (see the contract)."""
    out = []
    for clause in mode.split(","):
        found = CLAUSE.fullmatch(clause)
        if not found:  # an empty clause (``u+x,``): kept as written
            out.append(clause)
            continue
        who, op, perms, other = found.groups()
        if set(who) >= set("ugo") or "a" in who or (not who and op and set(perms) <= set("rxX")):
            who = "a"
        out.append(who + (op + "".join(sorted(perms)) if op else other))
    return ",".join(out)


def input_file(name: str, words: list[str]) -> tuple[str | None, list[str]]:
    """For a filter, the file of its only redirection when that is ``< FILE`` (``<FILE``), and the other words."""
    if name not in FILTERS or (name == "tail" and any(w in FOLLOW or w.startswith("--follow") for w in words)):
        return None, words
    redirects = [i for i, w in enumerate(words) if "<" in w or ">" in w]
    if len(redirects) != 1:
        return None, words
    i = redirects[0]
    if words[i] == "<" and i + 1 < len(words):
        return words[i + 1], words[:i] + words[i + 2:]
    if words[i].startswith("<") and words[i][1:2] not in ("<", "(", "&", ">", ""):
        return words[i][1:], words[:i] + words[i + 1:]
    return None, words


def tidy(name: str, arguments: list[str]) -> list[str]:
    """Arguments with ``--``, ``./`` and ``.service`` read as the contract says."""
    if "--" in arguments and not name.startswith(NO_DASH_DASH):
        rest = arguments[arguments.index("--") + 1:]
        if not any(a.startswith("-") and a != "-" for a in rest):
            arguments = [a for a in arguments if a != "--"] if arguments.count("--") == 1 else arguments
    if name in DOT_PATHS:
        first = 1 if name == "chown" else 0  # chown's owner is no path (chmod's mode is split off before)
        arguments = arguments[:first] + [_dot(a) for a in arguments[first:]]
    if name.startswith("systemctl "):
        arguments = [_unit(a) for a in arguments]
    return arguments


def _dot(path: str) -> str:
    rest = path
    while rest.startswith("./"):
        rest = rest[2:].lstrip("/")
    if rest == path or rest.startswith("-") or ":" in rest:
        return path
    return rest or "."


def _unit(name: str) -> str:
    base = name[:-len(".service")] if name.endswith(".service") else name
    return name if not base or base.endswith(UNIT_TYPES) else base
