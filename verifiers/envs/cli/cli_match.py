"""The cli verifier's comparison form of a command line: what two lines must share to count as the same command.

Pure functions of the tokens (``line_form``):
- A line is its simple commands with the operators between them, in order; a trailing ``;`` is dropped.
- A command whose option grammar is known (``GRAMMAR``) is its name, its options as a sorted multiset (each
  value-taking option paired with its value first; short clusters split for ``CLUSTERED`` commands; long twins
  and ``-20`` as their short form, ``ALIASES``, ``NUMERIC_COUNT``) and its other arguments in order.
- ``find`` (``find_form``): options and start paths in order, each run of AND-joined tests sorted; a word it does
  not know makes the whole command compared word for word.
- Any other command is compared word for word: no reordering at all.
- Honest equivalents are made one first (``cli_norm``), and ``cat f | FILTER`` is ``FILTER f``.
The rules in full: this env's README.md.
"""

from __future__ import annotations

from typing import Any

from flywheel.verifiers.envs.cli.cli_norm import FILTERS, FOLLOW, input_file, split_mode, switch_as_checkout, tidy

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
# Long options spelled as their short twin (``ls --all`` is ``ls -a``, ``head --lines=20`` is ``head -n 20``).
_COUNTS = {"--lines": "-n", "--bytes": "-c"}
ALIASES: dict[str, dict[str, str]] = {
    "ls": {"--all": "-a", "--almost-all": "-A", "--human-readable": "-h", "--recursive": "-R", "--reverse": "-r"},
    "head": _COUNTS, "tail": {**_COUNTS, "--follow": "-f"}, "git log": {"--max-count": "-n"},
    "rm": {"--recursive": "-r", "-R": "-r", "--force": "-f"}, "cp": {"--recursive": "-r", "-R": "-r"},
    "mkdir": {"--parents": "-p"}, "du": {"--summarize": "-s", "--human-readable": "-h", "--max-depth": "-d"},
    "grep": {"--recursive": "-r", "--count": "-c", "--ignore-case": "-i", "--line-number": "-n",
             "--invert-match": "-v", "--regexp": "-e", "--files-with-matches": "-l", "--word-regexp": "-w"},
    "tar": {"--create": "-c", "--extract": "-x", "--list": "-t", "--gzip": "-z", "--file": "-f", "--verbose": "-v",
            "--bzip2": "-j", "--xz": "-J", "--directory": "-C"},
    "chmod": {"--recursive": "-R"}, "chown": {"--recursive": "-R"},
}
NUMERIC_COUNT = {"head", "tail", "git log"}  # ``-20`` is ``-n 20``
TAR_FUNCTIONS = set("AcdrtuxP")  # an old-style bundle (``tar czf A DIR``) names one of these
SUBCOMMANDS = {"git", "systemctl"}
WRAPPERS = ("sudo", "doas", "command", "env", "nohup")
# find: its tests and how many words each takes (``-newerXY`` takes one too). Tests joined by AND commute; operators,
# parentheses, actions and the options that change the tests after them (``-daystart``, ``-follow``,
# ``-regextype``) do not.
FIND_TESTS = {**dict.fromkeys("-name -iname -path -ipath -wholename -iwholename -regex -iregex -type "
                              "-xtype -mtime -mmin -atime -amin -ctime -cmin -used -size -perm -user -group -uid -gid "
                              "-newer -anewer -cnewer -links -inum -samefile -fstype -maxdepth -mindepth -lname "
                              "-ilname".split(), 1),
              **dict.fromkeys("-empty -readable -writable -executable -nouser -nogroup -true -false -xdev -mount "
                              "-depth -noleaf".split(), 0)}
FIND_OTHERS = {**dict.fromkeys("-o -or , ( ) ! -not -delete -print -print0 -ls -prune -quit -daystart -follow"
                               .split(), 0), "-regextype": 1, "-printf": 1, "-fprint": 1, "-fprint0": 1, "-fls": 1,
               "-fprintf": 2}
FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}  # their command runs to ``;`` or ``+``
FIND_SPELLINGS = {"-not": "!", "-or": "-o"}

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
        if name in NUMERIC_COUNT and token[:1] == "-" and token[1:].isdigit():
            options.append(("-n", token[1:]))
            i += 1
        elif token.startswith("--") and "=" in token:
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
    aliases = ALIASES.get(name, {})
    options = [(aliases.get(flag, flag), value) for flag, value in options]
    return name, tuple(sorted(options, key=repr)), tuple(tidy(name, arguments))


def command_form(raw: list[str]) -> Form:
    cmd = switch_as_checkout(_strip_wrappers(raw))
    if not cmd:
        return ()
    name, words = _name(cmd)
    mode, words = split_mode(words) if name == "chmod" else (None, words)
    if mode is not None:  # chmod -x f: the mode is an argument
        found = known_form(name, words)
        return (*found[:2], (mode, *found[2]))
    source, rest = input_file(name, words)
    if source is not None and not known_form(name, rest)[2]:  # head -n 10 < f: f is the operand
        return known_form(name, [*rest, source])
    if name == "tar" and words and words[0].isalpha() and TAR_FUNCTIONS & set(words[0]):
        words = _tar_bundle(words)
    if name in GRAMMAR:
        return known_form(name, words)
    if name == "find":
        return find_form(words) or ("words", tuple(cmd))
    return ("words", tuple(cmd))


def _tar_bundle(words: list[str]) -> list[str]:
    """An old-style ``tar czf A DIR`` as ``-c -z -f A DIR``: each value-taking letter takes the next word in turn."""
    out, rest = [], words[1:]
    for letter in words[0]:
        out.append(f"-{letter}")
        if f"-{letter}" in GRAMMAR["tar"] and rest:
            out.append(rest.pop(0))
    return out + rest


def find_form(words: list[str]) -> Form | None:
    """``find``'s form: its -H/-L/-P options, its start paths, then its expression with each run of tests joined by
    AND (implicit, ``-a`` or ``-and``) sorted, a ``!`` moving with its test; None for a word it does not know."""
    i = 0
    while i < len(words) and words[i] in ("-H", "-L", "-P"):
        i += 1
    start = i
    while i < len(words) and words[i][:1] not in ("-", "!", "(", ")", ","):
        i += 1
    head, paths = tuple(words[:start]), tuple(words[start:i])
    expression: list[Any] = []
    run: list[Any] = []
    while i < len(words):
        unit, i = _find_unit(words, i)
        if unit is None:
            return None
        if unit[0] in FIND_TESTS or (unit[0] == "!" and len(unit) > 1):
            run.append(unit)
        elif unit[0] not in ("-a", "-and"):
            expression += [*sorted(run), unit]
            run = []
    return "find", head, paths, tuple(expression + sorted(run))


def _find_unit(words: list[str], i: int) -> tuple[Any, int]:
    """The unit of a find expression at ``words[i]`` (a test or action with its words, ``!`` with the test it
    negates, an operator) and the index after it; None for a word find_form does not know."""
    word = FIND_SPELLINGS.get(words[i], words[i])
    if word == "!" and i + 1 < len(words) and (words[i + 1] in FIND_TESTS or words[i + 1].startswith("-newer")):
        test, after = _find_unit(words, i + 1)
        return ("!", *test), after
    if word in FIND_EXEC:
        end = next((k for k in range(i + 1, len(words)) if words[k] in (";", "+")), len(words) - 1)
        return tuple(words[i:end + 1]), end + 1
    count = FIND_TESTS.get(word, FIND_OTHERS.get(word, 1 if word.startswith("-newer") else None))
    if count is None and word not in ("-a", "-and"):
        return None, i + 1
    return (word, *words[i + 1:i + 1 + (count or 0)]), i + 1 + (count or 0)


def line_form(commands: list[list[str]], operators: list[str]) -> Form:
    """A command line's comparison form: each command's form with the operator after it (see the contract)."""
    if operators[-1:] == [";"] and not commands[-1]:  # a trailing ``;`` changes nothing
        commands, operators = commands[:-1], operators[:-1]
    forms, ops = [command_form(cmd) for cmd in commands], list(operators)
    index = 0
    while index < len(ops):  # cat f | head -n 10 is head -n 10 f
        cat, nxt = forms[index], forms[index + 1]
        if ops[index] == "|" and cat[:2] == ("cat", ()) and len(cat[2]) == 1 and nxt[:1] and nxt[0] in FILTERS \
                and nxt[2] == () and not (nxt[0] == "tail" and FOLLOW & {f for f, _ in nxt[1]}):
            forms[index:index + 2], ops[index:index + 1] = [(*nxt[:2], cat[2])], []
        else:
            index += 1
    out: list[Any] = []
    for index, form in enumerate(forms):
        out.append(form)
        if index < len(ops):
            out.append(("op", ops[index]))
    return tuple(out)
