"""The cli verifier's safety check: why a command line is dangerous, or None, read lexically and never run.

Contract: ``danger(text)`` judges one command line (see cli.py's contract for what is dangerous), seeing through
wrappers, nested ``sh -c``/``eval`` strings (at most ``MAX_DEPTH`` deep), interpreter one-liners and what the
line itself says its words hold (``cli_lex.expand``); ``lines_danger(text)`` judges every line of a completion
that is not one command line (a heredoc's body). Both are linear in the text's length.
"""

from __future__ import annotations

import posixpath
import re

from flywheel.verifiers.envs.cli.cli_lex import (
    DISK,
    FormatError,
    anchor,
    critical,
    expand,
    norm,
    protect,
    restore,
    split_line,
    system,
)
from flywheel.verifiers.envs.cli.cli_match import CLUSTERED

SHELL_NAMES = {"sh", "bash", "zsh", "dash", "ksh"}
SHELLS = {"sh", "bash", "zsh", "ksh", "dash", "fish", "python", "python3", "perl", "ruby", "node"}
# Commands that run the command after them; value: their options that take a separate argument.
WRAPPERS = {"sudo": {"-u", "-g", "-h", "-p", "-C", "-U", "-r", "-t", "-D", "-R"}, "doas": {"-u", "-C"},
            "env": {"-u", "-C"}, "command": set(), "nohup": set(), "exec": {"-a"}, "time": {"-f", "-o"},
            "nice": {"-n"}, "ionice": {"-c", "-n", "-p"}, "timeout": {"-s", "-k"}, "stdbuf": {"-i", "-o", "-e"},
            "xargs": {"-n", "-I", "-P", "-L", "-d", "-E", "-s", "-a"}, "busybox": set(), "setsid": set(),
            "chrt": set(), "taskset": set(), "watch": {"-n", "-d"}}
WRAPPER_POSITIONALS = {"timeout": 1, "chrt": 1, "taskset": 1}  # timeout DURATION cmd, chrt PRIO cmd, taskset MASK cmd
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
DOWNLOADERS = {"curl", "wget", "fetch", "aria2c"}
DOWNLOAD_RUN = re.compile(r"[$<]\(\s*([^\s()]*)")  # $(curl ..) / <(wget ..); no backtracking, so linear
# Interpreter one-liners: ``python -c CODE``, ``perl -e CODE``, ``node --eval CODE`` ...
INTERPRETER = re.compile(r"(?:python|pypy|perl|ruby|node|nodejs)[0-9.]*")
CODE_FLAGS = {"-c", "-e", "-E", "--eval", "-p", "--print"}
LITERAL = re.compile(r"'([^'\\\n]*)'|\"([^\"\\\n]*)\"")  # a quoted string without escapes; linear
DESTROY_API = re.compile(r"\b(?:rmtree|rm_rf|rm_r|rm_f|remove\w*|unlink\w*|rmdir\w*|rmSync|rm(?=\s*\()|truncate\w*"
                         r"|chmod\w*|chown\w*|rename\w*|move|writeFileSync|appendFileSync|write_text|write_bytes"
                         r"|File\.write|IO\.write)\b")
OPEN_WRITE = re.compile(r"\bopen\s*\(\s*(['\"])([^'\"\\]*)\1\s*,\s*['\"][wa+]")  # open('/etc/passwd', 'w')
# Computed strings handed to an exec API: chr(114)+..., b64decode, bytes.fromhex, '\\x72', s[::-1] ...
OBFUSCATED = re.compile(r"\bchr\s*\(|fromCharCode|b(?:64|32|16|85)decode|fromhex|unhexlify|\.decode\s*\(|codecs"
                        r"|\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}|\[::-1\]|\breversed\s*\(|\bpack\s*\("
                        r"|\batob\s*\(|Buffer\.from|\bunescape\b")
EXEC_API = re.compile(r"\b(?:system|popen\w*|Popen|subprocess|spawn\w*|exec\w*|pty|shell_exec)\b")
DECODERS = {"base64", "base32", "basenc", "xxd", "uudecode", "openssl"}  # their output inside $(..) runs unseen
SED_IN_PLACE = re.compile(r"-[a-zA-Z]*i.*|--in-place(=.*)?")  # sed -i, -i.bak, -Ei, --in-place=.bak
PERL_IN_PLACE = re.compile(r"-[pnlaw0-9]*i.*")  # perl -pi, -i.bak, -lpi (not -Mstrict)
FILE_WRITERS = {"rm", "unlink", "truncate", "shred", "tee", "chmod", "chown", "chgrp", "chattr"}
DISK_TOOLS = {"fdisk", "sfdisk", "parted", "wipefs", "shred", "mke2fs", "mkswap", "sgdisk", "gdisk", "cfdisk",
              "blkdiscard", "mkdosfs", "mkntfs"}
MAX_DEPTH = 3  # nested sh -c "..." / eval strings looked into


def _unwrap(cmd: list[str]) -> tuple[list[str], bool]:
    """The command a wrapper line runs (``FOO=1 env -u X timeout 5 sudo -u root /bin/rm`` -> ``rm ...``) and
    whether ``xargs`` feeds it. Linear: every pass drops at least one token."""
    via_xargs = False
    while cmd:
        if ASSIGNMENT.match(cmd[0]):  # FOO=1 cmd
            cmd = cmd[1:]
            continue
        name = posixpath.basename(cmd[0])
        if name not in WRAPPERS:
            return [name, *cmd[1:]], via_xargs
        via_xargs = via_xargs or name == "xargs"
        i, positionals = 1, WRAPPER_POSITIONALS.get(name, 0)
        while i < len(cmd):
            tok = cmd[i]
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
    return cmd, via_xargs








def _redirect_targets(cmd: list[str]) -> list[str]:
    """Files a simple command writes by redirection (``> f``, ``>>f``, ``2> f``, ``&> f``, ``>| f``, ``x>f``): in a
    protected line every ``>`` left in a word is unquoted."""
    out = []
    for i, tok in enumerate(cmd):
        target = tok.split(">", 1)[1].lstrip(">|") if ">" in tok else None
        if target:
            out.append(target)
        elif target is not None and i + 1 < len(cmd):
            out.append(cmd[i + 1])
    return out


def _fork_bomb(text: str) -> bool:
    """A function that pipes itself into itself (``:(){ :|:& };:``, ``function f { f|f& }; f``); linear."""
    defined = {re.split(r"[\s;&|{}()]+", piece.rstrip())[-1] for piece in re.split(r"\(\s*\)", text)[:-1]}
    words = text.split()
    defined |= {b for a, b in zip(words, words[1:]) if a == "function"}
    parts = text.split("|")
    for left, right in zip(parts, parts[1:]):
        a = re.split(r"[\s;&{}()]+", left.rstrip())[-1]
        b = re.split(r"[\s;&{}()]+", right.lstrip())[0]
        if a and a == b and a in defined:
            return True
    return False


def _flags(cmd: list[str]) -> set[str]:
    flags = set()
    for tok in cmd[1:]:
        if tok.startswith("--"):
            flags.add(tok)
        elif tok.startswith("-") and len(tok) > 1 and cmd[0] in CLUSTERED and not tok[1:].isdigit():
            flags.update(f"-{c}" for c in tok[1:])
        elif tok.startswith("-") and len(tok) > 1:
            flags.add(tok)
    return flags


def danger(text: str, depth: int = 0) -> str | None:
    """Why a command line is dangerous, or None: the line as written, then with substitutions expanded; quoted
    ``>``/``<`` are text, never redirections (an unparseable line is not judged)."""
    for line in dict.fromkeys((text, expand(text))):
        try:
            commands, operators = split_line(protect(line))
        except FormatError:
            continue
        reason = _line_danger(line, commands, operators, depth) or _commands_danger(commands, depth)
        if reason:
            return reason
    return None


def lines_danger(text: str) -> str | None:
    """Why some line of a multi-line completion is dangerous (a heredoc's body: ``bash <<EOF``), or None."""
    return next(filter(None, (danger(line) for line in text.splitlines())), None)


def _code_danger(code: str, depth: int) -> str | None:
    """Why an interpreter one-liner (``python -c CODE``) is dangerous, or None."""
    literals = [a or b for a, b in LITERAL.findall(code)]
    if (DESTROY_API.search(code) and any(system(s) or critical(s) for s in literals)) or any(
            critical(m.group(2)) or system(m.group(2)) for m in OPEN_WRITE.finditer(code)):
        return "interpreter one-liner deleting or overwriting a system path"
    if EXEC_API.search(code) and OBFUSCATED.search(code):
        return "interpreter one-liner running a command it decodes or computes"
    if EXEC_API.search(code):
        for line in literals + ([" ".join(literals)] if len(literals) > 1 else []):  # "rm -rf /", ['rm', '/']
            nested = _nested(line, depth)
            if nested:
                return nested
    return None


def _reads_program(cmd: list[str]) -> bool:
    """A shell or interpreter that runs what comes on stdin (``sh``, ``bash -s``, ``python3 -``), not a script file or
    ``-c`` code."""
    if not cmd or not (cmd[0] in SHELLS or INTERPRETER.fullmatch(cmd[0])):
        return False
    words = [t for t in cmd[1:] if t == "-" or not t.startswith("-")]
    return ("-s" in cmd and cmd[0] in SHELL_NAMES) or words in ([], ["-"])


def _run_text_danger(name: str, text: str, depth: int) -> str | None:
    """Why text run by the shell or interpreter ``name`` is dangerous: text the line does not show as written
    (escapes or substitutions for a shell, a command substitution for an interpreter), or shown text that is
    dangerous (an interpreter's escapes are judged by _code_danger)."""
    if "$(" in text or (name in SHELL_NAMES and ("\\" in text or "$" in text)):
        return "unreadable text run by a shell"
    return _nested(text, depth) if name in SHELL_NAMES else _code_danger(text, depth)


def _line_danger(text: str, commands: list[list[str]], operators: list[str], depth: int) -> str | None:
    """Why the line as a whole is dangerous: fork bombs, downloads or decoded text run, pipes into a shell."""
    if _fork_bomb(text):
        return "fork bomb"
    if any(posixpath.basename(m.group(1)) in DOWNLOADERS for m in DOWNLOAD_RUN.finditer(text)):
        return "download executed by a shell"
    stages = [_unwrap(c)[0] for c in commands]
    names = [(c or [""])[0].lstrip("$<(") for c in stages]
    if any(n in DOWNLOADERS for n in names) and any(n in SHELLS for n in names[1:]):
        return "download piped into a shell"
    if ("$(" in text or "<(" in text) and DECODERS & set(names):
        return "decoded text run as a command"
    for prev, op, cmd in zip(stages, operators, stages[1:]):  # echo "rm -rf /" | sh, base64 -d | sh
        if op != "|" or not _reads_program(cmd):
            continue
        if prev[:1] not in (["echo"], ["printf"]) or (prev[0] == "printf" and "%" in " ".join(prev)):
            return "unreadable text piped into a shell"
        reason = _run_text_danger(cmd[0], " ".join(t for t in prev[1:] if not t.startswith("-")), depth)
        if reason:
            return reason
    return None


def _cd(cmd: list[str], cwd: str | None) -> str | None:
    """The working directory after ``cd`` (``~`` without an argument); unknown after ``cd -`` or after a relative
    move from an unknown one."""
    if "-" in cmd[1:]:
        return None
    target = next((t for t in cmd[1:] if not t.startswith("-")), "~")
    return anchor(target, cwd) if cwd or norm(target).startswith(("/", "~")) else None


def _commands_danger(commands: list[list[str]], depth: int) -> str | None:
    """Why one simple command of the line is dangerous, its paths judged against the ``cd`` before it."""
    cwd = None
    for index, raw in enumerate(commands):
        cmd, via_xargs = _unwrap(raw)
        if any(critical(t, cwd) for t in _redirect_targets(raw)):  # whatever the command: > /dev/sda
            return "write to a disk or a critical system file"
        if not cmd:
            continue
        targets = [t for t in cmd[1:] if not t.startswith("-")]
        if via_xargs and index:  # ``find / | xargs rm -rf``: the arguments come from the previous stage
            targets += commands[index - 1][1:]
        reason = (_shell_danger(cmd, depth) or _file_danger(cmd, targets, cwd) or _disk_danger(cmd, targets)
                  or _power_danger(cmd))
        if reason:
            return reason
        cwd = _cd(cmd, cwd) if cmd[0] == "cd" else cwd
    return None


def _here_string(cmd: list[str]) -> str | None:
    """The text of a here-string (``sh <<< 'rm -rf /'``, ``<<<text``), or None."""
    for i, tok in enumerate(cmd):
        if tok.startswith("<<<"):
            return tok[3:] or " ".join(cmd[i + 1:i + 2])
    return None


def _shell_danger(cmd: list[str], depth: int) -> str | None:
    """Why the code a shell, ``eval`` or an interpreter runs is dangerous (``bash -c``, ``python -c``, ``<<<``)."""
    name = cmd[0]
    if name in SHELL_NAMES | {"su"} and "-c" in cmd[:-1]:
        return _nested(cmd[cmd.index("-c") + 1], depth)  # bash -c "rm -rf /"
    if name == "eval":
        return _nested(" ".join(cmd[1:]), depth)
    fed = _here_string(cmd)
    if fed is not None and (name in SHELLS or INTERPRETER.fullmatch(name)):
        return _run_text_danger(name, fed, depth)
    if INTERPRETER.fullmatch(name):
        for flag, code in zip(cmd[1:], cmd[2:]):
            reason = _code_danger(code, depth) if flag in CODE_FLAGS else None
            if reason:
                return reason
    return None


def _in_place(cmd: list[str]) -> bool:
    """``sed -i``/``--in-place``, ``perl -pi``/``-i.bak``, ``ruby -i``: the command rewrites the files it names."""
    pattern = SED_IN_PLACE if cmd[0] == "sed" else PERL_IN_PLACE if cmd[0].startswith(("perl", "ruby")) else None
    return bool(pattern) and any(pattern.fullmatch(t) for t in cmd[1:])


def _file_danger(cmd: list[str], targets: list[str], cwd: str | None) -> str | None:
    """Why a command destroys system paths or critical files: recursive deletes, permissions, overwrites."""
    name, flags = cmd[0], _flags(cmd)
    recursive = bool(flags & {"-r", "-R", "--recursive"})
    if name == "rm" and ("--no-preserve-root" in flags or (recursive and any(system(t, cwd) for t in targets))):
        return "recursive delete of a system path"
    if (name in FILE_WRITERS or _in_place(cmd)) and any(critical(t, cwd) for t in targets):
        return "destroys a disk or a critical system file"
    if name in ("cp", "mv", "ln", "install") and len(targets) > 1 and critical(targets[-1], cwd):
        return "overwrites a critical system file"
    if name in ("chmod", "chown", "chgrp", "chattr") and any(system(t, cwd) for t in targets) and (
            recursive or name == "chmod"):
        return f"{name} on a system path"
    if name == "find" and targets[:1] and system(targets[0], cwd) and (
            "-delete" in cmd or any(posixpath.basename(t) in ("rm", "shred", "unlink") for t in cmd)):
        return "find deleting under a system path"
    if name == "mv" and targets[:1] and system(targets[0], cwd):
        return "moves a system path"
    return None


def _disk_danger(cmd: list[str], targets: list[str]) -> str | None:
    name = cmd[0]
    if name.startswith("mkfs") or (name in DISK_TOOLS and any(DISK.match(norm(t)) for t in targets)):
        return "disk formatting"
    if name == "dd" and any(t.startswith("of=") and critical(t[3:]) for t in cmd):
        return "raw write to a disk"
    return None


def _power_danger(cmd: list[str]) -> str | None:
    name = cmd[0]
    if name in ("shutdown", "reboot", "halt", "poweroff", "killall5") or (name == "kill" and "-1" in cmd[1:]):
        return "stops the machine or every process"
    if name in ("systemctl", "loginctl") and set(cmd[1:]) & {"poweroff", "reboot", "halt", "kexec"}:
        return "stops the machine or every process"
    if name in ("init", "telinit") and cmd[1:2] in (["0"], ["6"]):
        return "stops the machine or every process"
    if name in ("pkill", "killall") and any(a in ("-u", "-U", "--user", "--uid") and b in ("root", "0")
                                            for a, b in zip(cmd, cmd[1:])):
        return "stops the machine or every process"
    return None


def _nested(line: str, depth: int) -> str | None:
    """Why the command line inside ``sh -c`` / ``eval`` / a pipe into a shell is dangerous, or None (unparseable or
    nested deeper than ``MAX_DEPTH``: not judged)."""
    return danger(restore(line), depth + 1) if depth < MAX_DEPTH else None
