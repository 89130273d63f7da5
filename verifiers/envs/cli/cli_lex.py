"""The cli safety check's lexical view of a line: quoting, substitutions and paths, without running anything.

Pure functions of strings, each linear in its input:
- ``protect`` rewrites a line into what shlex reads as bash would (quoted or escaped special characters become
  stand-ins, ``$'..'`` is decoded, ``$(..)`` is lifted out of double quotes, a comment is cut); ``restore`` undoes
  the stand-ins for a string handed to a nested check (``sh -c``).
- ``expand`` substitutes what the line itself says a word holds: ``$(echo X)``, variables assigned earlier on the
  line (values of at most ``MAX_VALUE`` characters), ``${V:-W}`` defaults, ``${IFS}`` and ``$HOME``.
- ``system``/``critical`` judge a path normalized lexically; a relative path against the directory a ``cd`` on the
  line set, else a climb (``../../etc``) as the path it reaches from a directory exactly that deep.
- ``split_line`` reads a one-line command into simple commands and the operators between them, aligned;
  ``FormatError`` for anything else (two lines, a backtick, an unbalanced quote or parenthesis).
The rules in full: this env's README.md.
"""

from __future__ import annotations

import posixpath
import re
import shlex

SYSTEM_PATHS = {"/", "/*", "~", "~/", "$HOME", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt",
                "/proc", "/root", "/sbin", "/sys", "/usr", "/var", "/usr/bin", "/usr/lib", "/var/lib"}
DISK = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|dm-|md|mapper/|mem$|kmem$|port$)")
USER = re.compile(r"[a-z_][a-z0-9_-]*")
HOME = "/home/~"  # what ~, $HOME and ${HOME} become before lexical normalization (so ~/.. is /home)
# Files whose overwrite, truncation or removal breaks the machine (logins, sudo, boot, the kernel's sysrq) or
# lets someone in (any user's ~/.ssh/authorized_keys, see _login_keys).
CRITICAL_FILES = {"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/sudoers", "/etc/fstab",
                  "/etc/ld.so.preload", "/proc/sysrq-trigger", "/proc/sys/kernel/sysrq"}
CRITICAL_DIRS = {"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/boot", "/lib", "/lib64", "/usr/lib"}  # their files
LOGIN_KEYS = {"authorized_keys", "authorized_keys2"}
# Private-use stand-ins for a quoted or escaped special character (and for the ``|``/``&`` of ``>|``, ``>&``, ``&>``).
QUOTED = {">": "\ue000", "<": "\ue001", ";": "\ue002", "&": "\ue003", "|": "\ue004", "(": "\ue005", ")": "\ue006",
          "#": "\ue007"}
KEPT = {">", "<"}  # stand-ins split_line leaves in its words (a quoted > is never a redirection)
WORD_START = set(" \t;&|()<>")  # an unquoted # after one of these (or first) starts a comment
# Lexical substitution: ``$(echo /)``, ``$(printf '/etc')``, ``V=/ ... $V`` / ``${V}`` (assigned earlier) and the
# word of ``${V:-/}``. The default's word stops at the next $, brace or backslash, so the scan stays linear.
ECHO_SUB = re.compile(r"\$\(\s*(?:echo|printf)\s+(?:-[neE]+\s+)?(['\"]?)([^\s()'\"`;&|$\\]*)\1\s*\)")
DEFAULT = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?[-=+]([^{}$`\\]*)\}")
VARIABLE = re.compile(r"(?<![^\s;&|(])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?:\"(?P<dq>[^\"$`\\]*)\"|'(?P<sq>[^'$]*)'"
                      r"|(?P<bare>[^\s;&|'\"`$()\\]*)(?=[\s;&|)]|$))"
                      r"|\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<ref>[A-Za-z_][A-Za-z0-9_]*))")
IFS = re.compile(r"\$\{IFS\}|\$IFS(?![A-Za-z0-9_])")  # rm${IFS}-rf${IFS}/: the field separator is a space
HOME_VAR = re.compile(r"\$\{HOME\}|\$HOME(?![A-Za-z0-9_])")  # V=$HOME; rm -rf $V: ``~`` (norm reads it as home)
ANSI_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|.)")
ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
               "\\": "\\", "'": "'", '"': '"', "?": "?"}
MAX_VALUE = 64  # longer values are not substituted (cli_safety judges a line expanded past twice unsafe)


def protect(text: str) -> str:
    """``text`` as shlex should read it (see the contract): quoted or escaped specials replaced by their stand-ins
    (``QUOTED``), ``$'..'`` decoded into a double-quoted string, a ``$(..)`` inside double quotes lifted out of
    them, the ``|``/``&`` of ``>|``, ``>&``, ``<&``, ``&>`` hidden, and a comment cut. Linear."""
    out: list[str] = []
    stack: list[int] = []  # for each open ``$(`` lifted out of double quotes: the paren depth it closes at
    quote, depth, braces, i = "", 0, 0, 0
    while i < len(text):
        char, nxt = text[i], text[i + 1:i + 2]
        if quote == '"' and char == "$" and nxt == "(":
            out.append('"$(')
            stack.append(depth)
            quote, depth, i = "", depth + 1, i + 2
            continue
        if quote:
            quote, i = _quoted(text, i, quote, out)
            continue
        if char == "\\":
            out.append(char + QUOTED.get(nxt, nxt))
            i += 2
            continue
        if char == "$" and nxt == "'":
            i = _ansi_c(text, i + 2, out)
            continue
        if char == "#" and not braces and (not out or out[-1][-1:] in WORD_START):
            break  # a comment: bash runs nothing after it
        if char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if stack and depth == stack[-1]:
                stack.pop()
                out.append(')"')
                quote, i = '"', i + 1
                continue
        braces += 1 if text[i:i + 2] == "${" else -1 if char == "}" and braces else 0
        hidden = (char in "|&" and out[-1:] in (["<"], [">"])) or (char == "&" and nxt == ">")
        out.append(QUOTED[char] if hidden else char)
        i += 1
    return "".join(out)


def _quoted(text: str, i: int, quote: str, out: list[str]) -> tuple[str, int]:
    """One character (or escape pair) inside quotes; the quote still open after it and the next index."""
    char, nxt = text[i], text[i + 1:i + 2]
    if char == quote:
        out.append(char)
        return "", i + 1
    if char == "\\" and quote == '"' and nxt:
        out.append(char + QUOTED.get(nxt, nxt))
        return quote, i + 2
    out.append(QUOTED.get(char, char))
    return quote, i + 1


def _ansi_c(text: str, i: int, out: list[str]) -> int:
    """Decode the ``$'..'`` string whose body starts at ``i`` into a double-quoted one; the index after it."""
    end = i
    while end < len(text) and text[end] != "'":
        end += 2 if text[end] == "\\" else 1
    body = ANSI_ESCAPE.sub(_unescape, text[i:end]).replace("\\", "\\\\").replace('"', '\\"')
    out.append('"' + "".join(QUOTED.get(c, c) for c in body) + ('"' if end < len(text) else ""))
    return end + 1


def _unescape(match: re.Match[str]) -> str:
    """One ``$'..'`` escape decoded: ``\\x2f``, ``\\057``, ``\\u002f``, ``\\n``, ``\\'``; an unknown one kept."""
    code = match.group(1)
    if code[0] in "xuU":
        return chr(min(int(code[1:], 16), 0x10FFFF))
    if code[0] in "01234567":
        return chr(int(code, 8))
    return ANSI_SIMPLE.get(code, match.group(0))


def restore(text: str, keep: set[str] | frozenset[str] = frozenset()) -> str:
    """``text`` with the stand-ins of ``protect`` turned back into their characters (``keep``: not these)."""
    for char, stand_in in QUOTED.items():
        if char in keep:
            continue
        text = text.replace(stand_in, char)
    return text


def expand(text: str) -> str:
    """``text`` with ``$(echo X)``, ``${V:-X}`` and variables assigned earlier on the line replaced lexically; two
    linear passes (the second resolves one level of chaining, ``W=/; V=$W``)."""
    text = HOME_VAR.sub("~", IFS.sub(" ", ECHO_SUB.sub(lambda m: m.group(2), text)))
    text = DEFAULT.sub(lambda m: m.group(1), DEFAULT.sub(lambda m: m.group(1), text))  # ${V:-${W:-/}}
    return _expand_once(_expand_once(text))


def _expand_once(text: str) -> str:
    values: dict[str, str] = {}

    def substitute(match: re.Match[str]) -> str:
        name = match.group("name")
        if name:
            value = next((v for v in match.group("dq", "sq", "bare") if v is not None), "")
            if len(value) <= MAX_VALUE:
                values[name] = value
            else:
                values.pop(name, None)
            return match.group(0)
        return values.get(match.group("braced") or match.group("ref"), match.group(0))

    return VARIABLE.sub(substitute, text)


def norm(path: str) -> str:
    """A path normalized lexically: // and /./ collapsed, .. resolved, trailing / dropped, ~ / $HOME -> ``~``."""
    for home in ("${HOME}", "$HOME", "~"):
        if path == home or path.startswith(home + "/"):
            path = HOME + path[len(home):]
            break
    user, slash, rest = path[1:].partition("/")
    if path.startswith("~") and user in ("+", "-"):  # ~+ is $PWD, ~- is $OLDPWD: an unknown directory
        path = "." + slash + rest
    elif path.startswith("~") and USER.fullmatch(user):  # ~root, ~deploy
        path = ("/root" if user == "root" else f"/home/{user}") + slash + rest
    if not path.startswith("/"):
        return path  # relative: see anchor
    path = posixpath.normpath("/" + path.lstrip("/"))  # normpath keeps a leading // (POSIX), so drop it first
    return "~" if path == HOME else (f"~{path[len(HOME):]}" if path.startswith(HOME + "/") else path)


def anchor(path: str, cwd: str | None) -> str:
    """``path`` normalized, a relative one made absolute: against ``cwd`` (itself normalized) when known, else a
    climb out of the unknown directory as the path it reaches from one exactly that deep (``../../etc`` -> ``/etc``).
    Any other relative path stays relative."""
    path = norm(path)
    if path.startswith(("/", "~")):
        return path
    if cwd:
        return norm(f"{cwd}/{path}")
    rel = posixpath.normpath(path)
    if rel != ".." and not rel.startswith("../"):
        return path
    return "/" + "/".join(part for part in rel.split("/") if part != "..")


def system(path: str, cwd: str | None = None) -> bool:
    """A system path, or a glob of everything in one (``/*``, ``~/*``, ``/home/.*``)."""
    full = anchor(path, cwd)
    if full in SYSTEM_PATHS:
        return True
    head, tail = posixpath.split(full)
    if head == "/" and any(c in tail for c in "*?["):  # /e*, /???, /[e]tc: a glob at the root
        return True
    return tail in ("*", ".*", "*.*") and head in SYSTEM_PATHS | {"~"}  # a relative ``*`` has head ""


def critical(path: str, cwd: str | None = None) -> bool:
    """A disk device, a file whose overwrite breaks the machine, or a user's login keys."""
    full = anchor(path, cwd)
    guessed = not cwd and not norm(path).startswith(("/", "~"))  # a climb out of an unknown directory
    folder, name = posixpath.split(full)
    return full in CRITICAL_FILES or bool(DISK.match(full)) or (
        name in LOGIN_KEYS and posixpath.basename(folder) == ".ssh") or (not guessed and folder in CRITICAL_DIRS)


OPERATORS = ("&&", "||", ";;", "|&", "(", ")", ";", "&", "|")  # longest first: a run of punctuation splits greedily
PARENS = {"(", ")"}
_FENCE = re.compile(r"^```(?:sh|bash|shell|console)?\n(.*)\n```$", re.S)


class FormatError(ValueError):
    pass


def split_line(completion: str) -> tuple[list[list[str]], list[str]]:
    """Simple commands (token lists) of a one-line command and the operators after each, aligned: ``len(commands)``
    is ``len(operators) + 1``, a command empty only next to a parenthesis or after a trailing ``;``/``&``. Only
    unquoted punctuation is an operator; a quoted ``>``/``<`` stays a stand-in. Raises FormatError."""
    text = completion.strip()
    fenced = _FENCE.match(text)
    text = fenced.group(1).strip() if fenced else text
    if not text or "\n" in text or "`" in text:
        raise FormatError("expected exactly one command on one line")
    lexer = shlex.shlex(protect(text), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        tokens = list(lexer)
    except ValueError as err:
        raise FormatError(f"cannot parse the command: {err}") from None
    commands: list[list[str]] = [[]]
    operators: list[str] = []
    for token in tokens:
        if set(token) <= set(";&|()"):
            for op in _operators(token):
                operators.append(op)
                commands.append([])
        else:
            commands[-1].append(restore(token, KEPT))
    _check(commands, operators)
    return commands, operators


def _operators(run: str) -> list[str]:
    """A run of unquoted punctuation split into operators, longest first (``);`` is ``)`` then ``;``)."""
    out = []
    while run:
        op = next(o for o in OPERATORS if run.startswith(o))
        out.append(op)
        run = run[len(op):]
    return out


def _check(commands: list[list[str]], operators: list[str]) -> None:
    """FormatError for a line without a command, an empty command between two operators (unless one is a
    parenthesis) or unbalanced parentheses."""
    around = ["", *operators, ""]
    for index, cmd in enumerate(commands):
        before, after = around[index], around[index + 1]
        trailing = index == len(commands) - 1 and before in (";", "&")
        if not cmd and not trailing and before not in PARENS and after not in PARENS:
            raise FormatError("empty command around an operator")
    if not any(commands) or operators.count("(") != operators.count(")"):
        raise FormatError("empty command or unbalanced parentheses")
