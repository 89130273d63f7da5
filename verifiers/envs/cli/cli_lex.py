"""The cli safety check's lexical view of a line: quoting, substitutions and paths, without running anything.

Contract (pure functions of strings, each linear in its input):
- ``protect`` marks every ``>``/``<`` that is quoted or escaped so no later step reads it as a redirection
  (``grep '>' f`` redirects nothing); ``restore`` undoes it for a string handed to a nested check (``sh -c``).
- ``expand`` substitutes what the line itself says a word holds: ``$(echo X)``/``$(printf X)``, variables
  assigned earlier on the line (one level of chaining, values of at most ``MAX_VALUE`` characters), and the
  literal word of ``${V:-W}``/``${V-W}``/``${V:=W}``/``${V:+W}`` (the word may be what the line runs with).
- ``system``/``critical`` judge a path normalized lexically (``//``, ``/./``, ``..``, trailing ``/``, ``~``,
  ``$HOME``, ``${HOME}``). A relative path is made absolute against the working directory a ``cd`` on the line
  set; where it is unknown, a climb (``../../etc``) is judged as the path it reaches from a directory exactly
  that deep (``/etc``): any climb can reach ``/``. Such a guess never counts as a file of a critical directory
  (``../bin/app`` is a project's bin more often than ``/bin``).
- ``split_line`` reads a one-line command (optionally in one ```sh fence) into simple commands (token lists, shlex)
  and the operators after each; ``FormatError`` for anything else (two lines, a backtick, an unbalanced quote, an
  empty command around an operator).
"""

from __future__ import annotations

import posixpath
import re
import shlex

SYSTEM_PATHS = {"/", "/*", "~", "~/", "$HOME", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt",
                "/proc", "/root", "/sbin", "/sys", "/usr", "/var", "/usr/bin", "/usr/lib", "/var/lib"}
DISK = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|dm-|md|mapper/|mem$|kmem$|port$)")
HOME = "/home/~"  # what ~, $HOME and ${HOME} become before lexical normalization (so ~/.. is /home)
# Files whose overwrite, truncation or removal breaks the machine (logins, sudo, boot, the kernel's sysrq) or
# lets someone in (any user's ~/.ssh/authorized_keys, see _login_keys).
CRITICAL_FILES = {"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/sudoers", "/etc/fstab",
                  "/etc/ld.so.preload", "/proc/sysrq-trigger", "/proc/sys/kernel/sysrq"}
CRITICAL_DIRS = {"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/boot", "/lib", "/lib64", "/usr/lib"}  # their files
LOGIN_KEYS = {"authorized_keys", "authorized_keys2"}
QUOTED = {">": "\ue000", "<": "\ue001"}  # private-use stand-ins for a quoted or escaped > and <
# Lexical substitution: ``$(echo /)``, ``$(printf '/etc')``, ``V=/ ... $V`` / ``${V}`` (assigned earlier) and the
# word of ``${V:-/}``. The default's word stops at the next $, brace or backslash, so the scan stays linear.
ECHO_SUB = re.compile(r"\$\(\s*(?:echo|printf)\s+(?:-[neE]+\s+)?(['\"]?)([^\s()'\"`;&|$\\]*)\1\s*\)")
DEFAULT = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?[-=+]([^{}$`\\]*)\}")
VARIABLE = re.compile(r"(?<![^\s;&|(])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?:\"(?P<dq>[^\"$`\\]*)\"|'(?P<sq>[^'$]*)'"
                      r"|(?P<bare>[^\s;&|'\"`$()\\]*)(?=[\s;&|)]|$))"
                      r"|\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<ref>[A-Za-z_][A-Za-z0-9_]*))")
MAX_VALUE = 64  # longer values are not substituted (keeps the expanded line at most 32x the original)


def protect(text: str) -> str:
    """``text`` with each quoted or backslash-escaped ``>``/``<`` replaced by its stand-in (``QUOTED``)."""
    out, quote, escaped = [], "", False
    for char in text:
        literal = bool(quote) or escaped
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif char == quote:
            quote, literal = "", False
        elif not quote and char in "'\"":
            quote = char
        out.append(QUOTED.get(char, char) if literal else char)
    return "".join(out)


def restore(text: str) -> str:
    """``text`` with the stand-ins of ``protect`` turned back into ``>``/``<``."""
    for char, stand_in in QUOTED.items():
        text = text.replace(stand_in, char)
    return text


def expand(text: str) -> str:
    """``text`` with ``$(echo X)``, ``${V:-X}`` and variables assigned earlier on the line replaced lexically; two
    linear passes (the second resolves one level of chaining, ``W=/; V=$W``)."""
    text = DEFAULT.sub(lambda m: m.group(1), ECHO_SUB.sub(lambda m: m.group(2), text))
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
    return tail in ("*", ".*", "*.*") and head in SYSTEM_PATHS | {"~"}  # a relative ``*`` has head ""


def critical(path: str, cwd: str | None = None) -> bool:
    """A disk device, a file whose overwrite breaks the machine, or a user's login keys."""
    full = anchor(path, cwd)
    guessed = not cwd and not norm(path).startswith(("/", "~"))  # a climb out of an unknown directory
    folder, name = posixpath.split(full)
    return full in CRITICAL_FILES or bool(DISK.match(full)) or (
        name in LOGIN_KEYS and posixpath.basename(folder) == ".ssh") or (not guessed and folder in CRITICAL_DIRS)


OPERATORS = {"|", "||", "&&", ";", "&"}
_FENCE = re.compile(r"^```(?:sh|bash|shell|console)?\n(.*)\n```$", re.S)


class FormatError(ValueError):
    pass


def split_line(completion: str) -> tuple[list[list[str]], list[str]]:
    """Simple commands (token lists) of a one-line command and the operators after each (a trailing ``;`` or ``&``
    included); raises FormatError."""
    text = completion.strip()
    fenced = _FENCE.match(text)
    text = fenced.group(1).strip() if fenced else text
    if not text or "\n" in text or "`" in text:
        raise FormatError("expected exactly one command on one line")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as err:
        raise FormatError(f"cannot parse the command: {err}") from None
    commands, current, last_op, operators = [], [], "", []
    for token in tokens:
        if token in OPERATORS or set(token) <= set(";&|"):
            commands.append(current)
            current, last_op = [], token
            operators.append(token)
        else:
            current.append(token)
    commands.append(current)
    dangling = not current and last_op not in ("", ";", "&")
    if any(not c for c in commands[:-1]) or not commands[0] or dangling:
        raise FormatError("empty command around an operator")
    return [c for c in commands if c], operators
