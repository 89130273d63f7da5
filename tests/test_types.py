"""ty (pinned in the dev extra, configured in pyproject.toml's [tool.ty.*]) finds no type error in the source folders
flows/, tasks/, verifiers/ and schemas/, with imports resolved as installed (flywheel.* through src/)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ty_finds_no_errors_in_the_source() -> None:
    ty = Path(sys.executable).parent / "ty"
    done = subprocess.run([str(ty), "check", "--no-progress", "--output-format", "concise", "--python", sys.prefix],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-1000:]
