"""The cli safety check's view of interpreter code: one-liners (``python -c``, ``perl -e``, ``php -r``, ``lua -e``,
``node --eval``) and ``awk`` programs, read lexically and never run.

Contract: ``programs(cmd)`` lists the code strings a command runs; ``code_danger(code, nested)`` says why one is
dangerous (a deleting or writing API on a system path or critical file; an exec API on a computed string, or on a
literal shell line that ``nested`` judges dangerous), or None. Both are linear in their input.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from flywheel.verifiers.envs.cli.cli_lex import critical, system

INTERPRETER = re.compile(r"(?:python|pypy|perl|ruby|node|nodejs|php|lua|luajit)[0-9.]*")
AWKS = {"awk", "gawk", "mawk", "nawk", "busybox awk"}
AWK_VALUED = {"-F", "-v", "-f", "--field-separator", "--assign", "--file"}
CODE_FLAGS = {"-c", "-e", "-E", "--eval", "-p", "--print", "-r"}
LITERAL = re.compile(r"'([^'\\\n]*)'|\"([^\"\\\n]*)\"")  # a quoted string without escapes; linear
QX = re.compile(r"\bqx\s*(?:\(([^()]*)\)|\{([^{}]*)\}|/([^/]*)/)")  # perl's qx(..), qx{..}, qx/../
DESTROY_API = re.compile(r"\b(?:rmtree|rm_rf|rm_r|rm_f|remove\w*|unlink\w*|rmdir\w*|rmSync|rm(?=\s*\()|truncate\w*"
                         r"|chmod\w*|chown\w*|rename\w*|move|writeFileSync|appendFileSync|write_text|write_bytes"
                         r"|File\.write|IO\.write)\b")
OPEN_WRITE = re.compile(r"\bopen\s*\(\s*(['\"])([^'\"\\]*)\1\s*,\s*['\"][wa+]")  # open('/etc/passwd', 'w')
# Computed strings handed to an exec API: chr(114)+..., b64decode, bytes.fromhex, '\\x72', s[::-1] ...
OBFUSCATED = re.compile(r"\bchr\s*\(|fromCharCode|b(?:64|32|16|85)decode|fromhex|unhexlify|\.decode\s*\(|codecs"
                        r"|\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}|\[::-1\]|\breversed\s*\(|\bpack\s*\("
                        r"|\batob\s*\(|Buffer\.from|\bunescape\b")
EXEC_API = re.compile(r"\b(?:system|popen\w*|Popen|subprocess|spawn\w*|exec\w*|pty|shell_exec|passthru|qx)\b")


def programs(cmd: list[str]) -> list[str]:
    """The code strings a command runs: each ``-c``/``-e``/``-r`` value of an interpreter, an awk program."""
    if INTERPRETER.fullmatch(cmd[0]):
        return [code for flag, code in zip(cmd[1:], cmd[2:]) if flag in CODE_FLAGS]
    if cmd[0] not in AWKS:
        return []
    i = 1
    while i < len(cmd) and cmd[i].startswith("-") and cmd[i] != "--":
        i += 2 if cmd[i] in AWK_VALUED else 1
    i += 1 if cmd[i:i + 1] == ["--"] else 0
    return cmd[i:i + 1]


def code_danger(code: str, nested: Callable[[str], str | None]) -> str | None:
    """Why interpreter code is dangerous, or None; ``nested`` judges a shell line the code hands an exec API."""
    literals = [a or b for a, b in LITERAL.findall(code)] + ["".join(m.groups("")) for m in QX.finditer(code)]
    if (DESTROY_API.search(code) and any(system(s) or critical(s) for s in literals)) or any(
            critical(m.group(2)) or system(m.group(2)) for m in OPEN_WRITE.finditer(code)):
        return "interpreter one-liner deleting or overwriting a system path"
    if EXEC_API.search(code) and OBFUSCATED.search(code):
        return "interpreter one-liner running a command it decodes or computes"
    if EXEC_API.search(code):
        for line in literals + ([" ".join(literals)] if len(literals) > 1 else []):  # "rm -rf /", ['rm', '/']
            reason = nested(line)
            if reason:
                return reason
    return None
