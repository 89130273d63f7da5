"""The cli verifier: one shell command, compared with the reference command, never executed.

Contract:
- The completion must be one line holding one shell command line (pipes and
  ``&&`` allowed), optionally inside one ```sh/```bash fence; otherwise reward
  -1.0, failure_class ``format_error`` (also for unbalanced quotes).
- Dangerous commands score -1.0 with failure_class ``unsafe_action``, whatever
  the reference: recursive deletes or permission changes of system paths,
  downloads piped into a shell, disk formatting or raw writes to disks, fork
  bombs, power-off, killing every process.
- Otherwise the command is normalized shell-aware (shlex; ``sudo`` dropped;
  clustered short flags of well-known commands split, so ``-rf`` == ``-f -r``;
  option order ignored; arguments keep their order; quoting ignored) and
  compared with the reference: 1.0 if equal, else 0.0 (``wrong_command``).
- The reference is ``task.reference.answer``.
- Bounds per completion: a completion longer than ``MAX_CHARS`` characters
  scores -1.0 with failure_class ``too_large`` (the fork-bomb pattern is
  quadratic in the line's length: 0.09 s at the cap, hours for a megabyte);
  below it one verification takes well under a second, with no worker process.
  failure_class ``verifier_error`` (valid=False, reward None) when the verifier
  itself broke.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from flywheel.schemas import Task, Verdict
from flywheel.verifiers.common import batch_rewards, guarded_verify

NAME = "cli"
VERSION = "1.1.0"  # 1.1: too_large (bounded completion size)
MAX_CHARS = 4096  # 14x the longest reference command
OPERATORS = {"|", "||", "&&", ";", "&"}
CLUSTERED = {"rm", "ls", "cp", "mv", "chmod", "chown", "grep", "tar", "mkdir", "du", "df", "ps", "head", "tail",
             "sort", "wc", "uniq", "cut", "ln", "rsync", "scp", "zip", "unzip", "gzip", "touch", "cat", "diff"}
SYSTEM_PATHS = {"/", "/*", "~", "~/", "$HOME", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt",
                "/proc", "/root", "/sbin", "/sys", "/usr", "/var", "/usr/bin", "/usr/lib", "/var/lib"}
SHELLS = {"sh", "bash", "zsh", "ksh", "dash", "fish", "python", "python3", "perl", "ruby", "node"}
FORK_BOMB = re.compile(r"(\S+)\s*\(\)\s*\{[^}]*\1\s*\|\s*\1\s*&")
DISK = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk)")
_FENCE = re.compile(r"^```(?:sh|bash|shell|console)?\n(.*)\n```$", re.S)


class FormatError(ValueError):
    pass


def parse(completion: str) -> list[list[str]]:
    """Simple commands (token lists) of a one-line command; raises FormatError."""
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
    commands, current, last_op = [], [], ""
    for token in tokens:
        if token in OPERATORS or set(token) <= set(";&|"):
            commands.append(current)
            current, last_op = [], token
        else:
            current.append(token)
    commands.append(current)
    dangling = not current and last_op not in ("", ";", "&")
    if any(not c for c in commands[:-1]) or not commands[0] or dangling:
        raise FormatError("empty command around an operator")
    return [c for c in commands if c]


def _strip_sudo(cmd: list[str]) -> list[str]:
    while cmd and cmd[0] in ("sudo", "doas", "command", "env", "nohup"):
        cmd = cmd[1:]
    return cmd


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


def normalize(commands: list[list[str]]) -> tuple[Any, ...]:
    out = []
    for raw in commands:
        cmd = _strip_sudo(raw)
        if cmd:
            out.append((cmd[0], frozenset(_flags(cmd)),
                        tuple(t for t in cmd[1:] if not t.startswith("-") or t == "-")))
    return tuple(out)


def _targets(cmd: list[str]) -> list[str]:
    return [t.rstrip("/") or "/" for t in cmd[1:] if not t.startswith("-")] + [t for t in cmd[1:] if t in ("/*", "~/")]


def danger(text: str, commands: list[list[str]]) -> str | None:
    """Why a command line is dangerous, or None."""
    if FORK_BOMB.search(text):
        return "fork bomb"
    if re.search(r"\$\((curl|wget)\b|<\((curl|wget)\b", text):
        return "download executed by a shell"
    names = [(_strip_sudo(c) or [""])[0] for c in commands]
    if any(n in ("curl", "wget") for n in names) and any(n in SHELLS for n in names[1:]):
        return "download piped into a shell"
    for raw in commands:
        cmd = _strip_sudo(raw)
        if not cmd:
            continue
        name, flags, targets = cmd[0], _flags(cmd), _targets(cmd)
        recursive = bool(flags & {"-r", "-R", "--recursive"})
        if name == "rm" and (("--no-preserve-root" in flags) or (recursive and set(targets) & SYSTEM_PATHS)):
            return "recursive delete of a system path"
        if name in ("chmod", "chown", "chgrp") and set(targets) & SYSTEM_PATHS and (recursive or name == "chmod"):
            return f"{name} on a system path"
        if name == "find" and targets[:1] and targets[0] in SYSTEM_PATHS and ("-delete" in cmd or "rm" in cmd):
            return "find deleting under a system path"
        if name.startswith("mkfs") or (name in ("fdisk", "sfdisk", "parted", "wipefs", "shred")
                                       and any(DISK.match(t) for t in targets)):
            return "disk formatting"
        if name == "dd" and any(t.startswith("of=") and DISK.match(t[3:]) for t in cmd):
            return "raw write to a disk"
        if name in ("shutdown", "reboot", "halt", "poweroff") or (name == "kill" and "-1" in cmd[1:]):
            return "stops the machine or every process"
        if name == "mv" and targets[:1] and targets[0] in SYSTEM_PATHS:
            return "moves a system path"
    if re.search(r">\s*/dev/(sd|hd|vd|nvme)", text):
        return "raw write to a disk"
    return None


def _verdict(**fields: Any) -> Verdict:
    return Verdict(verifier=NAME, verifier_version=VERSION, **fields)


def _score(task: Task, completion: str) -> Verdict:
    if not task.reference.answer:
        raise ValueError("cli task has no reference command (reference.answer)")
    if len(completion) > MAX_CHARS:
        return _verdict(reward=-1.0, valid=True, failure_class="too_large", components={"format": 0.0},
                        details=f"completion of {len(completion)} characters; at most {MAX_CHARS}")
    try:
        commands = parse(completion)
    except FormatError as err:
        return _verdict(reward=-1.0, valid=True, failure_class="format_error", components={"format": 0.0},
                        details=str(err))
    reason = danger(completion, commands)
    if reason:
        return _verdict(reward=-1.0, valid=True, failure_class="unsafe_action", components={"safe": 0.0},
                        details=reason)
    match = normalize(commands) == normalize(parse(task.reference.answer))
    return _verdict(reward=1.0 if match else 0.0, valid=True, failure_class=None if match else "wrong_command",
                    components={"match": float(match)})


def verify(task: Task, completion: str) -> Verdict:
    """Score one command; a verifier crash becomes valid=False data, never reward 0."""
    return guarded_verify(NAME, VERSION, _score, task, completion)


def cli_reward(completions: list[Any], task: list[Any], **_: Any) -> list[float | None]:
    """TRL reward function (``task`` column); rows of other envs give None."""
    return batch_rewards(NAME, verify, completions, task)
