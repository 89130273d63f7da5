"""The commands that run other commands, for the cli safety check: wrappers (``env``, ``timeout``, ``sudo -u``,
``xargs`` ...) seen through to the command they run, the code of ``sh -c`` / ``flock -c`` / ``script -c``, a
here-string's text, and whether a shell or interpreter reads its program from stdin. Lexical and linear."""

from __future__ import annotations

import posixpath
import re

from flywheel.verifiers.envs.cli.cli_code import INTERPRETER
from flywheel.verifiers.envs.cli.cli_rules import alternatives

SHELL_NAMES = {"sh", "bash", "zsh", "dash", "ksh"}
SHELLS = {"sh", "bash", "zsh", "ksh", "dash", "fish", "python", "python3", "perl", "ruby", "node"}
SOURCES = {"source", "."}  # run a file in this shell: ``source /dev/stdin``, ``. <(..)``
STDIN = {"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"}
# Commands that run the command after them; value: their options that take a separate argument.
WRAPPERS = {"sudo": {"-u", "-g", "-h", "-p", "-C", "-U", "-r", "-t", "-D", "-R"}, "doas": {"-u", "-C"},
            "env": {"-u", "-C", "-S"}, "command": set(), "nohup": set(), "exec": {"-a"}, "time": {"-f", "-o"},
            "nice": {"-n"}, "ionice": {"-c", "-n", "-p"}, "timeout": {"-s", "-k"}, "stdbuf": {"-i", "-o", "-e"},
            "xargs": {"-n", "-I", "-P", "-L", "-d", "-E", "-s", "-a"}, "busybox": set(), "setsid": set(),
            "chrt": set(), "taskset": set(), "watch": {"-n", "-d"}, "strace": {"-o", "-e", "-p", "-s", "-u", "-E"},
            "ltrace": {"-o", "-e", "-p", "-s", "-u"}, "chroot": {"--userspec", "--groups"}, "flock": {"-w", "-E"},
            "runuser": {"-u", "-g", "-G", "-s"}, "unbuffer": set(), "faketime": set(), "fakeroot": set(), "sg": set()}
# Positionals before the command: timeout DURATION, chrt PRIO, taskset MASK, chroot DIR, flock FILE, faketime TIME.
WRAPPER_POSITIONALS = {"timeout": 1, "chrt": 1, "taskset": 1, "chroot": 1, "flock": 1, "faketime": 1, "sg": 1}
# Commands whose ``-c CODE`` a shell runs (``flock FILE -c``, ``runuser USER -c``, ``script -qc``, ``sg GROUP -c``);
# value: how many words (a file, a user) may come before it.
SHELL_OPTION = {"flock": 1, "runuser": 1, "script": 1, "sg": 1}
KEYWORDS = {"{", "}", "!", "if", "then", "elif", "else", "do", "while", "until"}  # reserved words before a command
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
SHELL_C = re.compile(r"-[a-zA-Z]*c[a-zA-Z]*")  # -c, -xc, -ec, -lc


def unwrap(cmd: list[str]) -> tuple[list[str], bool, str | None]:
    """The command a wrapper line runs (``FOO=1 env -u X timeout 5 sudo -u root /bin/rm`` -> ``rm ...``), whether
    ``xargs`` feeds it and the directory ``env -C DIR`` runs it in. Linear: every pass drops at least one token."""
    via_xargs, where = False, None
    while cmd:
        if ASSIGNMENT.match(cmd[0]) or cmd[0] in KEYWORDS:  # FOO=1 cmd, { cmd, then cmd
            cmd = cmd[1:]
            continue
        if "," in cmd[0] and alternatives(cmd[0]) != [cmd[0]]:  # {rm,-rf,/}: bash expands the braces into words
            cmd = [*alternatives(cmd[0]), *cmd[1:]]
            continue
        if any(c.isspace() for c in cmd[0]):  # watch 'rm -rf /': a shell line, judged by _commands_danger
            return cmd, via_xargs, where
        name = posixpath.basename(cmd[0])
        code = option_code(name, cmd)
        if code is not None:
            return ["sh", "-c", code], via_xargs, where
        if name not in WRAPPERS:
            return [name, *cmd[1:]], via_xargs, where
        via_xargs = via_xargs or name == "xargs"
        i, positionals = 1, WRAPPER_POSITIONALS.get(name, 0)
        while i < len(cmd):
            tok = cmd[i]
            if name == "env" and (tok == "-C" or tok.startswith("--chdir=")):
                where = cmd[i + 1] if tok == "-C" and i + 1 < len(cmd) else tok.partition("=")[2]
            if tok == "--":
                i += 1
                break
            if tok.startswith("-") and len(tok) > 1:
                i += 2 if tok in WRAPPERS[name] else 1
            elif ASSIGNMENT.match(tok) and name in ("env", "sudo"):
                i += 1
            elif positionals:
                i, positionals = i + 1, positionals - 1
            else:
                break
        cmd = cmd[i:]
    return cmd, via_xargs, where


def option_code(name: str, cmd: list[str]) -> str | None:
    """The shell code of ``flock FILE -c CODE``, ``runuser USER -c``, ``script -qc``, ``sg GROUP -c``, or None."""
    words = SHELL_OPTION.get(name, -1)
    for i, tok in enumerate(cmd[1:], start=1):
        if words < 0:
            return None
        if tok.startswith("--command="):
            return tok.partition("=")[2]
        if tok in ("-c", "--command") or (name == "script" and SHELL_C.fullmatch(tok)):
            return cmd[i + 1] if i + 1 < len(cmd) else None
        words -= 0 if tok.startswith("-") else 1
    return None


def reads_program(cmd: list[str]) -> bool:
    """A shell or interpreter that runs what comes on stdin (``sh``, ``bash -s``, ``python3 -``, ``sh /dev/stdin``,
    ``source /dev/stdin``), not a script file or ``-c`` code."""
    if not cmd or not (cmd[0] in SHELLS | SOURCES or INTERPRETER.fullmatch(cmd[0])):
        return False
    words = [t for t in cmd[1:] if t in STDIN or not t.startswith("-")]
    if cmd[0] in SOURCES:
        return bool(words) and words[0] in STDIN
    return ("-s" in cmd and cmd[0] in SHELL_NAMES) or words == [] or (len(words) == 1 and words[0] in STDIN)


def here_string(cmd: list[str]) -> str | None:
    """The text of a here-string (``sh <<< 'rm -rf /'``, ``<<<text``), or None."""
    for i, tok in enumerate(cmd):
        if tok.startswith("<<<"):
            return tok[3:] or " ".join(cmd[i + 1:i + 2])
    return None


def shell_code(cmd: list[str]) -> str | None:
    """The code string of ``sh -c CODE`` (``-xc``, ``-c -- CODE``, ``su -c``), or None."""
    if cmd[0] not in SHELL_NAMES | {"su"}:
        return None
    for i, tok in enumerate(cmd[1:], start=1):
        if tok == "-c" or tok == "--command" or SHELL_C.fullmatch(tok):
            rest = [t for t in cmd[i + 1:] if t != "--" and not re.fullmatch(r"[-+][a-zA-Z]+", t)]
            return rest[0] if rest else None
        if not tok.startswith(("-", "+")) and cmd[0] != "su":
            return None  # a script file: what follows are its arguments
    return None
