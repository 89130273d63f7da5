"""Write docs/CLI.md, the full ``flywheel`` command reference, from the CLI's own ``--help``.

Every command and subcommand of the typer app is rendered with click's plain formatter at a fixed width (no rich
boxes or colours, no terminal size), so the file is the same on every machine. Run it after changing a command or
an option; ``--check`` writes nothing and exits 1 when docs/CLI.md is stale (tests/test_cli_reference.py runs it).

    .venv/bin/python scripts/cli_reference.py           # regenerate docs/CLI.md
    .venv/bin/python scripts/cli_reference.py --check   # exit 1 if docs/CLI.md is not current
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "CLI.md"
WIDTH = 100
REGENERATE = ".venv/bin/python scripts/cli_reference.py"

HEADER = f"""# `flywheel` command reference

Generated from the CLI's `--help` by `scripts/cli_reference.py`; do not edit by hand. After changing a command or
an option, regenerate it with one command:

```bash
{REGENERATE}
```

`tests/test_cli_reference.py` fails while this file is stale. Exit codes, input rules and what each command is for:
[README.md](../README.md#commands).
"""


def _plain(command: Any) -> None:
    """Typer renders help with rich when rich is installed; None selects click's plain formatter."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None


def _walk(command: Any, ctx: Any) -> list[tuple[str, str, str]]:
    """(command path, one-line summary, help text) for ``command`` and every visible subcommand, depth first."""
    _plain(command)
    formatter = ctx.make_formatter()
    command.format_help(ctx, formatter)
    text = "\n".join(line.rstrip() for line in formatter.getvalue().rstrip().splitlines())
    rows = [(ctx.command_path, command.get_short_help_str(limit=WIDTH), text)]
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            child = type(ctx)(sub, info_name=name, parent=ctx)
            rows.extend(_walk(sub, child))
    return rows


def render() -> str:
    """docs/CLI.md's text, built from the CLI as it is imported now."""
    import typer

    from flywheel.flows.cli import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="flywheel", terminal_width=WIDTH, max_content_width=WIDTH)
    rows = _walk(root, ctx)
    index = ["## Commands", ""]
    index += [f"- [`{path}`](#{path.replace(' ', '-')}): {summary}" for path, summary, _ in rows[1:]]
    sections = []
    for path, _, text in rows:
        sections += [f"## {path}", "", "```text", text, "```", ""]
    return HEADER + "\n" + "\n".join(index) + "\n\n" + "\n".join(sections).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/CLI.md is stale; write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: regenerate it with `{REGENERATE}`", file=sys.stderr)
            return 1
        print(f"{TARGET.relative_to(ROOT)} is current")
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
