"""The ``flywheel`` command line: subcommands map names to flows and verifiers (the edge).

Exit codes: 0 success; 1 a fatal error, printed as one line that says what to
fix (a bad option value too: usage errors are not click's exit 2 box); 2
(score, dedupe) some input lines were malformed: the good lines were still
processed and every bad line was reported with its number.

Input JSONL (score, profile-reward, dedupe) is read as bytes and parsed with
orjson, strictly: a line that is not UTF-8, holds a lone surrogate escape
(``"\\ud800"``) or NaN/Infinity, a number out of double range or a duplicate
key, is a malformed line; the output is strict JSON (orjson), never NaN or
Infinity. Every option is checked (bounds, files read, --output usable and not
the input) before any work, so an expected error never comes after minutes of
work or inside a flow's traceback.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Union, get_args, get_origin

for _key, _value in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                     "PREFECT_LOGGING_LEVEL": "WARNING", "GX_ANALYTICS_ENABLED": "false"}.items():
    os.environ.setdefault(_key, _value)  # before Prefect is imported: it reads them once
for _key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_key] = "1"  # no network at run time: nothing is fetched from a hub (read once, on import)

import typer  # noqa: E402
from pydantic import BaseModel, ValidationError  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

from flywheel.flows import __version__  # noqa: E402

err = Console(stderr=True, soft_wrap=True)  # a long path is never broken across lines (logs, pipes, tests)


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)  # a path may hold "[/x]"
    raise typer.Exit(code)


class OneLineUsageErrors(TyperGroup):
    """Click's usage errors (``--n 1e23``, an unknown option) as one ``error:`` line and exit 1, like every other
    error: click's boxed usage message exits 2, which this CLI reserves for malformed input lines."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as exc:  # typer's vendored click: UsageError, BadParameter, NoSuchOption...
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `flywheel`: the help (as typer tells it apart)
                err.print(exc.format_message(), highlight=False)
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else ""
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            err.print(f"[red]error:[/red] {escape(where + ' '.join(exc.format_message().split()) + hint)}",
                      highlight=False, soft_wrap=True)
            sys.exit(1)
        except typer.Abort:
            err.print("[red]error:[/red] aborted", highlight=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineUsageErrors, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Flywheel: seeds to verified datasets, verifiers, evaluation and training for RLVR.")


def explain(exc: BaseException) -> str:
    from flywheel.verifiers.common import one_line  # only on an error: the verifiers package imports sympy (~0.5 s)

    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        msg = e["msg"].removeprefix("Value error, ")  # a validator's own message already names the option
        return f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {msg}" if e["loc"] else one_line(msg, None)
    return one_line(exc, None)  # whole: the message names the file or option to fix


def option(model: type[BaseModel], field: str, *decls: str, help: str | None = None, **kwargs: Any) -> Any:
    """A typer option whose default (and help, when the field has a description) is the config model field's, so
    each is written once, in the model; ``help`` is only for fields without a description. Required fields give a
    required option. tests/flows/test_cli_defaults.py checks every command against its models."""
    info = model.model_fields[field]
    default = ... if info.is_required() else info.default
    return typer.Option(default, *decls, help=info.description or help, **kwargs)


def cli_type(annotation: Any) -> Any:
    """The type typer parses an option of a config field as; pydantic then checks the value against the field (a
    choice is a string here, one line naming the choices there)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return cli_type(kept[0]) if len(kept) == 1 else str
    if origin is tuple and args:
        return list.__class_getitem__(cli_type(args[0]))  # list[T] of a T known only at run time
    return annotation if annotation in (bool, int, float, str) else str


def model_options(model: type[BaseModel], decls: dict[str, tuple[str, ...]] | None = None,
                  **kwargs: dict[str, Any]) -> list[inspect.Parameter]:
    """One keyword option per field of ``model``, in field order: name, type, default and help all from the field
    (``option``); ``decls`` gives a field other option names, ``kwargs`` typer keywords (e.g. a metavar)."""
    return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=cli_type(info.annotation),
                              default=option(model, name, *(decls or {}).get(name, ()), **kwargs.get(name, {})))
            for name, info in model.model_fields.items()]


def with_parameters(*params: inspect.Parameter) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command taking ``**values`` the signature ``params`` (typer reads the signature and the annotations)."""
    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, "__signature__", inspect.Signature(list(params)))  # noqa: B010 (what inspect.signature reads)
        fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return fn
    return apply


def _version(value: bool) -> None:
    if value:
        typer.echo(f"flywheel {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version.")) -> None:
    pass


def _progress() -> Progress:
    return Progress(TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=False)


class _NoInputErrorTraceback(logging.Filter):
    """On the console only: a flow or task run that failed on bad input (a ValueError, which the command prints as
    its one ``error:`` line) logs no traceback before it; Prefect's "Finished in state Failed" line still shows,
    and the API's handler (the UI's flow-run logs) still gets the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ValueError))


def in_api(run: Callable[[], Any]) -> Any:
    """Run a flow on PREFECT_API_URL's server, or on a temporary API that never outlives this command."""
    from prefect.logging.handlers import PrefectConsoleHandler

    from flywheel.flows.prefect_api import temporary_api

    quiet = _NoInputErrorTraceback()
    consoles = [h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]
    for handler in consoles:
        handler.addFilter(quiet)
    try:
        with temporary_api():
            return run()
    finally:
        for handler in consoles:
            handler.removeFilter(quiet)


def with_progress(run: Callable[[], Any]) -> Any:
    """Run a flow with a rich progress bar per stage (flows report through flows.runtime.progress)."""
    from flywheel.flows.runtime import set_progress

    with _progress() as bar:
        ids: dict[str, Any] = {}

        def show(stage: str, done: int, total: int) -> None:
            if stage not in ids:
                ids[stage] = bar.add_task(stage, total=total)
            bar.update(ids[stage], completed=done, total=total)

        set_progress(show)
        try:
            return in_api(run)
        finally:
            set_progress(None)


def check_output(path: Path, option: str, folder_wanted: bool = False,
                 inputs: tuple[tuple[str, Path], ...] = (), registry_ok: bool = False) -> None:
    """Fail before any work when ``path`` cannot become a file (or, ``folder_wanted``, a folder): a folder where a
    file goes or a file where a folder goes, a folder this process may not create files in (tasks.files still
    guards the write itself), a path inside a published dataset version or (unless ``registry_ok``: the registry's
    own commands) a model registry, or one of the command's ``inputs`` (option, path): writing it would destroy what
    is being read. Raises ValueError."""
    from flywheel.tasks.files import check_destination

    check_destination(path, option, registry_ok)
    for name, source in inputs:
        if path.exists() and source.exists() and os.path.samefile(path, source):  # links and hard links too
            raise ValueError(f"{option} {path} is the same file as {name} {source}: writing it would overwrite the "
                             f"input; choose another {option}")
    if folder_wanted and path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path} is a file; name a folder")
    if not folder_wanted and path.is_dir():
        raise ValueError(f"{option} {path} is a directory; name a file")
    if not folder_wanted and path.exists() and not path.is_file():
        return  # a device or FIFO is written through in place: its folder's permissions do not matter
    folder = path if folder_wanted else path.resolve().parent  # a symlink's target is replaced beside the target
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # missing folders are created at write time: the nearest existing one must allow it
    if not folder.is_dir():
        raise ValueError(f"{option} {path}: {folder} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: cannot create files in {folder} (permission denied or read-only); "
                         "choose a path you can write")


def output_or_fail(path: Path, option: str, inputs: tuple[tuple[str, Path], ...] = ()) -> None:
    try:
        check_output(path, option, inputs=inputs)
    except ValueError as exc:
        fail(str(exc))
