"""docs/CLI.md is what scripts/cli_reference.py renders from the CLI's --help now (imports the CLI only: no Prefect
API, model or server)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current() -> None:
    script = _script()
    assert script.main(["--check"]) == 0, f"docs/CLI.md is stale: regenerate it with `{script.REGENERATE}`"


def test_cli_reference_covers_every_command_in_plain_text() -> None:
    text = _script().render()
    for path in ("flywheel run", "flywheel train", "flywheel eval", "flywheel generate", "flywheel registry export",
                 "flywheel serve-env"):
        assert f"\n## {path}\n" in text
        assert f"Usage: {path} [OPTIONS]" in text
    assert "\x1b[" not in text and "╭" not in text  # no rich colours or boxes: the same file on every terminal
    blocks = [part.split("```")[0] for part in text.split("```text")[1:]]
    assert all(len(line) <= 100 for block in blocks for line in block.splitlines())


def test_check_fails_on_a_stale_file(tmp_path: Path, monkeypatch, capsys) -> None:
    script = _script()
    stale = tmp_path / "docs" / "CLI.md"
    stale.parent.mkdir()
    stale.write_text("# old\n", encoding="utf-8")
    monkeypatch.setattr(script, "ROOT", tmp_path)
    monkeypatch.setattr(script, "TARGET", stale)
    assert script.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err and stale.read_text(encoding="utf-8") == "# old\n"
    assert script.main([]) == 0 and script.main(["--check"]) == 0
