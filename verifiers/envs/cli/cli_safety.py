"""The cli verifier's safety check: why a command line is dangerous, or None, read lexically and never run.

Contract: ``danger(text)`` judges one command line (what is dangerous: this env's README.md), seeing through
wrappers and shell keywords, subshells, groups, function bodies, command and process substitutions (split_line
makes every unquoted parenthesis an operator, and lifts ``$(..)`` out of double quotes), nested ``sh -c``/``eval``
strings and ``find -exec`` commands (at most ``MAX_DEPTH`` deep), interpreter one-liners (cli_code) and what the
line itself says its words hold (``cli_lex.expand``; a line whose substitutions more than double it is unsafe);
``lines_danger(text)`` judges every line of a completion that is not one command line (a heredoc's body). Both are
linear in the text's length. Rules for one simple command are in cli_rules, wrappers in cli_wrappers.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from flywheel.verifiers.envs.cli.cli_code import INTERPRETER, code_danger, programs
from flywheel.verifiers.envs.cli.cli_lex import MAX_VALUE, FormatError, anchor, critical, expand, restore, split_line
from flywheel.verifiers.envs.cli.cli_rules import chdir, disk_danger, file_danger, power_danger, redirect_targets
from flywheel.verifiers.envs.cli.cli_vars import parallel_lines, variants
from flywheel.verifiers.envs.cli.cli_wrappers import (
    SHELL_NAMES,
    SHELLS,
    SOURCES,
    here_string,
    reads_program,
    shell_code,
    unwrap,
)

INPUT_AS_CODE = re.compile(r"\s*(?:\{\}|\$[@*0-9]|\"\$[@*0-9]\")\s*")  # xargs -I{} sh -c {}: the input is the code
DOWNLOADERS = {"curl", "wget", "fetch", "aria2c"}
DOWNLOAD_RUN = re.compile(r"[$<]\(\s*([^\s()]*)")  # $(curl ..) / <(wget ..); no backtracking, so linear
DECODERS = {"base64", "base32", "basenc", "xxd", "uudecode", "openssl"}  # their output inside $(..) runs unseen
FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}
MAX_DEPTH = 3  # nested sh -c "..." / eval strings / find -exec commands looked into
MAX_GROWTH = 2  # substitutions may at most double a line (plus two values); past it the line is unsafe
MAX_VALUES = (16, 4)  # parallel arguments followed on the line, in nested code; past it: unsafe
MAX_VARIANTS = (16 * 4096, 4096)  # characters of loop-variable copies of a line (cli_vars.variants); past it: unsafe


def _fork_bomb(text: str) -> bool:
    """A function that runs itself twice at once (``:(){ :|:& };:``, ``f(){ f & f; }; f``); linear."""
    defined = {re.split(r"[\s;&|{}()]+", piece.rstrip())[-1] for piece in re.split(r"\(\s*\)", text)[:-1]}
    words = text.split()
    defined |= {b for a, b in zip(words, words[1:]) if a == "function"}
    parts = re.split(r"[|&]", text)
    for left, right in zip(parts, parts[1:]):
        a = re.split(r"[\s;&{}()]+", left.rstrip())[-1]
        b = re.split(r"[\s;&{}()]+", right.lstrip())[0]
        if a and a == b and a in defined:
            return True
    return False


def danger(text: str, depth: int = 0) -> str | None:
    """Why a command line is dangerous, or None: the line as written, then with substitutions expanded (an
    unparseable line is not judged; one that substitutions more than double is unsafe)."""
    expanded = expand(text)
    if len(expanded) > MAX_GROWTH * (len(text) + MAX_VALUE):
        return "substitutions expand the line past twice its length"
    lines = dict.fromkeys((text, expanded))
    for line in list(lines):
        try:
            more = variants(line, *split_line(line), MAX_VARIANTS[depth > 0])
        except FormatError:
            continue
        if more is None:
            return "a loop, read or array over more values than the check follows"
        if any(len(m) > MAX_GROWTH * (len(text) + MAX_VALUE) for m in more):
            return "substitutions expand the line past twice its length"
        lines.update(dict.fromkeys(m for v in more for m in (v, expand(v))))
    for line in lines:
        try:
            commands, operators = split_line(line)
        except FormatError:
            continue
        reason = _line_danger(line, commands, operators, depth) or _commands_danger(commands, operators, depth)
        if reason:
            return reason
    return None


def lines_danger(text: str) -> str | None:
    """Why some line of a multi-line completion is dangerous (a heredoc's body: ``bash <<EOF``), or None."""
    return next(filter(None, (danger(line) for line in text.splitlines())), None)


def _run_text_danger(name: str, text: str, depth: int) -> str | None:
    """Why text run by the shell or interpreter ``name`` is dangerous: text the line does not show as written
    (escapes or substitutions for a shell, a command substitution for an interpreter), or shown text that is
    dangerous (an interpreter's escapes are judged by code_danger)."""
    shell = name in SHELL_NAMES | SOURCES
    if "$(" in text or (shell and ("\\" in text or "$" in text)):
        return "unreadable text run by a shell"
    return _nested(text, depth) if shell else code_danger(text, lambda line: _nested(line, depth))


def _fed_danger(source: list[str], runner: str, depth: int) -> str | None:
    """Why the output of ``source`` (a command) run by ``runner`` is dangerous: anything but a plain echo/printf is
    text the line does not show."""
    if source[:1] not in (["echo"], ["printf"]) or (source[0] == "printf" and "%" in " ".join(source)):
        return "unreadable text piped into a shell"
    words = source[1:]
    while words and re.fullmatch(r"-[neE]+", words[0]):  # echo's own options
        words = words[1:]
    return _run_text_danger(runner, " ".join(words), depth)


def _line_danger(text: str, commands: list[list[str]], operators: list[str], depth: int) -> str | None:
    """Why the line as a whole is dangerous: fork bombs, downloads or decoded text run, pipes into a shell, process
    substitutions feeding one."""
    if _fork_bomb(text):
        return "fork bomb"
    if any(posixpath.basename(m.group(1)) in DOWNLOADERS for m in DOWNLOAD_RUN.finditer(text)):
        return "download executed by a shell"
    unwrapped = [unwrap(c) for c in commands]
    stages = [u[0] for u in unwrapped]
    names = [(c or [""])[0].lstrip("$<(") for c in stages]
    if any(n in DOWNLOADERS for n in names) and any(n in SHELLS for n in names[1:]):
        return "download piped into a shell"
    if ("$(" in text or "<(" in text) and DECODERS & set(names):
        return "decoded text run as a command"
    for index, op in enumerate(operators):
        prev, cmd, via_xargs = stages[index], stages[index + 1], unwrapped[index + 1][1]
        fed = op == "|" and cmd and (reads_program(cmd) or (
            via_xargs and INPUT_AS_CODE.fullmatch(shell_code(cmd) or "x")))  # xargs -I{} sh -c {}
        reason = _fed_danger(prev, cmd[0], depth) if fed else None
        reason = reason or (_substitution_danger(commands[index], cmd, depth) if op == "(" else None)
        if reason:
            return reason
    return None


def _substitution_danger(before: list[str], body: list[str], depth: int) -> str | None:
    """``>(sh)`` (output fed to a shell), and a process's output run: ``sh <(echo ..)``, ``source <(..)``,
    ``sh -c "$(..)"``, ``eval $(..)``, ``$(..)`` as the command."""
    if before[-1:] == [">"] and reads_program(body):
        return "output fed to a shell"
    runs = unwrap(before[:-1])[0] if before[-1:] == ["$"] else None
    if runs is not None and (runs in ([], ["eval"]) or shell_code([*runs, "$"] if runs else ["x"]) == "$"):
        return _fed_danger(body, "sh", depth) if body else None
    runner = unwrap(before[:-1])[0] if before[-1:] == ["<"] else []
    if runner and (runner[0] in SHELLS | SOURCES or INTERPRETER.fullmatch(runner[0])) and len(runner) == 1:
        return _fed_danger(body, runner[0], depth) if body else None
    return None


def _commands_danger(commands: list[list[str]], operators: list[str], depth: int) -> str | None:
    """Why one simple command of the line is dangerous, its paths judged against the ``cd`` before it (a ``cd``
    inside parentheses ends with them)."""
    cwd, saved = None, []
    for index, raw in enumerate(commands):
        cmd, via_xargs, where = unwrap(raw)
        reason = None
        if cmd and cmd[0] == "parallel":
            fed = commands[index - 1][1:] if index and operators[index - 1] == "|" else []
            reason = _lines_danger(parallel_lines(cmd, fed, MAX_VALUES[depth > 0]), depth)
        elif cmd and any(c.isspace() for c in cmd[0]):  # watch 'rm -rf /', sg root 'rm -rf /': a shell line
            reason = _nested(" ".join(cmd), depth)
        if any(critical(t, cwd) for t in redirect_targets(raw)):  # whatever the command: > /dev/sda
            return "write to a disk or a critical system file"
        if cmd and not reason:
            targets = [t for t in cmd[1:] if not t.startswith("-")]
            if via_xargs and index:  # ``find / | xargs rm -rf``: the arguments come from the previous stage
                targets += commands[index - 1][1:]
            here = anchor(where, cwd) if where else cwd
            reason = _command_danger(cmd, targets, here, depth)
            cwd = chdir(cmd, cwd) if cmd[0] == "cd" else cwd
        if reason:
            return reason
        op = operators[index] if index < len(operators) else ""
        if op == "(":
            saved.append(cwd)
        elif op == ")" and saved:
            cwd = saved.pop()
    return None


def _lines_danger(lines: list[str] | None, depth: int) -> str | None:
    """Why one of the command lines ``parallel`` runs is dangerous (None for lines: too many to follow)."""
    if lines is None:
        return "parallel over more arguments than the check follows"
    return next(filter(None, (_nested(line, depth) for line in lines)), None)


def _command_danger(cmd: list[str], targets: list[str], cwd: str | None, depth: int) -> str | None:
    return (_shell_danger(cmd, depth) or file_danger(cmd, targets, cwd) or disk_danger(cmd, targets)
            or power_danger(cmd) or _find_exec_danger(cmd, targets, cwd, depth))


def _find_exec_danger(cmd: list[str], targets: list[str], cwd: str | None, depth: int) -> str | None:
    """Why a command ``find -exec`` runs is dangerous, ``{}`` standing for the first start path."""
    if cmd[0] != "find" or depth >= MAX_DEPTH:
        return None
    start, i = (targets[0] if targets else "."), 0
    while i < len(cmd):  # each word is in at most one -exec command: linear per depth
        if cmd[i] not in FIND_EXEC:
            i += 1
            continue
        end = next((k for k in range(i + 1, len(cmd)) if cmd[k] in (";", "+")), len(cmd))
        inner, _, _ = unwrap([start if t == "{}" else t for t in cmd[i + 1:end]])
        reason = _command_danger(inner, [t for t in inner[1:] if not t.startswith("-")], cwd, depth + 1) \
            if inner else None
        if reason:
            return reason
        i = end + 1
    return None


def _shell_danger(cmd: list[str], depth: int) -> str | None:
    """Why the code a shell, ``eval`` or an interpreter runs is dangerous (``bash -c``, ``python -c``, ``<<<``)."""
    name, code = cmd[0], shell_code(cmd)
    if code is not None:  # bash -c "rm -rf /"; its arguments are $0, $1 ..: sh -c 'rm -rf $1' _ /
        args = cmd[cmd.index(code) + 1:]
        return _nested(f"set -- {' '.join(shlex.quote(a) for a in args)}; {code}" if args else code, depth)
    if name == "eval":
        return _nested(" ".join(cmd[1:]), depth)
    fed = here_string(cmd)
    if fed is not None and (name in SHELLS or INTERPRETER.fullmatch(name) or reads_program(cmd)):
        return _run_text_danger(name, fed, depth)
    for code in programs(cmd):
        reason = code_danger(code, lambda line: _nested(line, depth))
        if reason:
            return reason
    return None


def _nested(line: str, depth: int) -> str | None:
    """Why the command line inside ``sh -c`` / ``eval`` / a pipe into a shell is dangerous, or None (unparseable or
    nested deeper than ``MAX_DEPTH``: not judged)."""
    return danger(restore(line), depth + 1) if depth < MAX_DEPTH else None
