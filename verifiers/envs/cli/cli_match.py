"""The cli verifier's comparison form of a command line: what two lines must share to count as the same command.

Contract (pure functions of the tokens):
- A line is its simple commands with the operators between them, in order (``a | b`` is not ``a; b``,
  ``a && b`` not ``a || b``); a trailing ``;`` is dropped (it changes nothing), a trailing ``&`` kept.
- A leading ``sudo``/``doas``/``command``/``env``/``nohup`` is dropped.
- A command whose option grammar is known (``GRAMMAR``: the seeds' commands and other common ones) is its name,
  its options as a sorted multiset, and its other arguments in order. An option that takes a value is paired
  with it first (``-n 5``, ``-n5``, and in a short cluster the rest of the cluster or the next word:
  ``tar -czf A`` is ``-c -z -f=A``, ``tar -cfz A`` is ``-c -f=z`` then ``A``), so options reorder freely but a
  value never moves to another option. Short clusters are split for ``CLUSTERED`` commands (``-rf`` == ``-f -r``);
  after ``--`` every word is an argument. ``git``/``systemctl`` are known per subcommand.
- Any other command (``find``, whose primaries are an ordered expression, ``lsof``, ``ssh``, unknown tools) is
  compared word for word: no reordering at all, so ``find . -name X -mtime Y`` is not ``find . -mtime X -name Y``
  (nor, conservatively, ``find . -mtime Y -name X``).
"""

from __future__ import annotations

from typing import Any

CLUSTERED = {"rm", "ls", "cp", "mv", "chmod", "chown", "grep", "tar", "mkdir", "du", "df", "ps", "head", "tail",
             "sort", "wc", "uniq", "cut", "ln", "rsync", "scp", "zip", "unzip", "gzip", "touch", "cat", "diff"}
# Known commands -> their options that take a value (a separate word, the rest of a short cluster, or ``=``).
# Every other option of a known command is a switch. Long options with an optional value take it only after ``=``.
GRAMMAR: dict[str, frozenset[str]] = {name: frozenset(flags.split()) for name, flags in {
    "rm": "", "cat": "", "wc": "--files0-from", "gzip": "-S --suffix", "touch": "-d -t -r --date --reference",
    "ls": "-I -T -w --ignore --hide --tabsize --width --block-size --format --sort --time --time-style",
    "cp": "-S -t --suffix --target-directory", "mv": "-S -t --suffix --target-directory",
    "ln": "-S -t --suffix --target-directory", "mkdir": "-m --mode", "chmod": "--reference",
    "chown": "--reference --from",
    "grep": "-e -f -m -A -B -C -d -D --regexp --file --max-count --after-context --before-context --context "
            "--include --exclude --exclude-dir --exclude-from --label --binary-files --devices --directories",
    "tar": "-f -C -T -X -b -g -H -I -K -L -N -V --file --directory --files-from --exclude --exclude-from "
           "--transform --owner --group --mode --format --newer --after-date --label --blocking-factor "
           "--listed-incremental --use-compress-program --strip-components",
    "du": "-d -B -t -X --max-depth --block-size --threshold --exclude --exclude-from --time-style --files0-from",
    "df": "-B -t -x --block-size --type --exclude-type",
    "ps": "-o -p -u -U -g -G -C -t -q -s -O --pid --ppid --user --group --sort --format --cols --rows --width",
    "head": "-n -c --lines --bytes", "tail": "-n -c -s --lines --bytes --pid --sleep-interval",
    "sort": "-k -t -o -S -T --key --field-separator --output --buffer-size --temporary-directory --parallel",
    "uniq": "-f -s -w --skip-fields --skip-chars --check-chars",
    "cut": "-d -f -b -c --delimiter --fields --bytes --characters --output-delimiter",
    "rsync": "-e -f -T -B --rsh --filter --exclude --include --exclude-from --include-from --temp-dir --port "
             "--password-file --bwlimit --chmod --chown --log-file --backup-dir --suffix",
    "scp": "-P -i -o -c -F -l -S -J", "zip": "-x -i -b -n -t -P", "unzip": "-d -x -P",
    "diff": "-I -F -L -x -X -S --label --exclude --exclude-from --ignore-matching-lines --starting-file",
    "ping": "-c -i -w -W -s -t -I -p -Q -l -m -M -S -T",
    "pkill": "-u -U -g -G -P -s -t -F --signal --euid --uid --group --pgroup --parent --session --terminal",
    "git log": "-n --max-count --author --committer --grep --since --until --after --before -S -G --skip",
    "git checkout": "-b -B --orphan", "git branch": "-m -M -c -C -u --set-upstream-to",
    "git commit": "-m -F -C -c --message --file --author --date", "git push": "-o --push-option",
    "git pull": "", "git status": "", "git diff": "", "git add": "", "git clone": "-b -o --branch --depth --origin",
    "systemctl restart": "", "systemctl status": "-n --lines -o --output", "systemctl start": "",
    "systemctl stop": "", "systemctl enable": "", "systemctl disable": "", "systemctl reload": "",
}.items()}
SUBCOMMANDS = {"git", "systemctl"}
WRAPPERS = ("sudo", "doas", "command", "env", "nohup")

Form = tuple[Any, ...]


def _strip_wrappers(cmd: list[str]) -> list[str]:
    while cmd and cmd[0] in WRAPPERS:
        cmd = cmd[1:]
    return cmd


def _name(cmd: list[str]) -> tuple[str, list[str]]:
    """The grammar's name of a command (``git log`` for git's subcommands) and the words after it."""
    if cmd[0] in SUBCOMMANDS and len(cmd) > 1 and not cmd[1].startswith("-"):
        return f"{cmd[0]} {cmd[1]}", cmd[2:]
    return cmd[0], cmd[1:]


def _short(token: str, words: list[str], i: int, name: str, valued: frozenset[str]) -> tuple[list[Any], int]:
    """The (option, value) pairs of one short-option word (``-n``, ``-n5``, ``-czf``, ``-5``) and the index of the
    word after them: a valued option takes the rest of its word, else the next word."""
    letters = token[1:] if name in CLUSTERED and not token[1:].isdigit() else None
    if letters is None:  # one option: -n, -n5, -5, or a multi-letter word option of a non-clustering command
        if token in valued or len(token) == 2:
            return _valued(token, words, i, valued)
        return [(token[:2], token[2:]) if token[:2] in valued else (token, None)], i + 1
    out: list[Any] = []
    for k, letter in enumerate(letters, start=2):
        flag = f"-{letter}"
        if flag in valued and token[k:]:
            return [*out, (flag, token[k:])], i + 1
        if flag in valued:
            return [*out, (flag, words[i + 1] if i + 1 < len(words) else None)], i + 2
        out.append((flag, None))
    return out, i + 1


def _valued(token: str, words: list[str], i: int, valued: frozenset[str]) -> tuple[list[Any], int]:
    """``token`` as an option: paired with the next word when it takes a value."""
    if token in valued:
        return [(token, words[i + 1] if i + 1 < len(words) else None)], i + 2
    return [(token, None)], i + 1


def known_form(name: str, words: list[str]) -> Form:
    """A known command: its name, its (option, value) pairs sorted, its arguments in order (see the contract)."""
    valued = GRAMMAR[name]
    options: list[Any] = []
    arguments: list[str] = []
    i = 0
    while i < len(words):
        token = words[i]
        if token == "--":
            arguments.append("--")
            arguments.extend(words[i + 1:])
            break
        if token.startswith("--") and "=" in token:
            flag, value = token.split("=", 1)
            options.append((flag, value))
            i += 1
        elif token.startswith("--"):
            found, i = _valued(token, words, i, valued)
            options.extend(found)
        elif token.startswith("-") and len(token) > 1:
            found, i = _short(token, words, i, name, valued)
            options.extend(found)
        else:
            arguments.append(token)
            i += 1
    return name, tuple(sorted(options, key=repr)), tuple(arguments)


def command_form(raw: list[str]) -> Form:
    cmd = _strip_wrappers(raw)
    if not cmd:
        return ()
    name, words = _name(cmd)
    if name in GRAMMAR:
        return known_form(name, words)
    return ("words", tuple(cmd))


def line_form(commands: list[list[str]], operators: list[str]) -> Form:
    """A command line's comparison form: each command's form with the operator after it (see the contract)."""
    ops = operators[:-1] if len(operators) >= len(commands) and operators[-1:] == [";"] else operators
    out: list[Any] = []
    for index, cmd in enumerate(commands):
        out.append(command_form(cmd))
        if index < len(ops):
            out.append(("op", ops[index]))
    return tuple(out)
