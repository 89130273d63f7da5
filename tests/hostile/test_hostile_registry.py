"""Registry races and a damaged audit log: two real processes promote (or roll back) at the same moment, repeated;
the event log must stay the truth (each promote's `previous` is production right before it; alias and promotion
history agree). A damaged event file is one line from `flywheel registry list`, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flywheel.tasks.release.registry import Registry, RegistryError

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")
FIELDS = {"name": "tool_call-policy", "base_model": {"ref": "embedded", "hash": "b" * 64},
          "dataset": {"name": "tool_call", "version": "v-x", "content_hash": "c" * 64, "seeds_hash": "s" * 64},
          "verifiers": {"tool_call": "1.0.0"}, "training": {"method": "sft"}}
TRIALS = 5
# each racer imports everything, says it is ready, then waits for the same go file: both act within a millisecond
RACER = """
import os, sys, time
from pathlib import Path
from flywheel.tasks.release.registry import Registry
reg, action, ref, go = Registry(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
Path(sys.argv[5]).touch()
while not go.exists():
    time.sleep(0.0005)
reg.promote(ref, {"passed": True}) if action == "promote" else reg.rollback()
"""


def adapter(root: Path, i: int) -> Path:
    """A PEFT-shaped folder (what the registry checks and hashes); the content differs per i."""
    folder = root / f"a{i}"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4, "i": i}))
    (folder / "adapter_model.safetensors").write_bytes(bytes([i]) * 64)
    return folder


def registry_with(tmp_path: Path, n: int, promoted: int) -> tuple[Registry, list[str]]:
    reg = Registry(tmp_path / "registry")
    ids = [reg.register(adapter(tmp_path / "adapters", i), FIELDS).id for i in range(n)]
    for vid in ids[:promoted]:
        reg.promote(vid, {"passed": True})
    return reg, ids


def race(tmp_path: Path, reg: Registry, jobs: list[tuple[str, str]]) -> None:
    """Start one process per job, release them together, and require each to succeed."""
    go = tmp_path / "go"
    go.unlink(missing_ok=True)
    procs, ready = [], []
    for k, (action, ref) in enumerate(jobs):
        flag = tmp_path / f"ready-{k}"
        flag.unlink(missing_ok=True)
        ready.append(flag)
        procs.append(subprocess.Popen([sys.executable, "-c", RACER, str(reg.root), action, ref, str(go), str(flag)],
                                      stderr=subprocess.PIPE, text=True))
    deadline = time.time() + 60
    while not all(f.exists() for f in ready):
        assert time.time() < deadline and all(p.poll() is None for p in procs), [p.stderr.read() for p in procs]
        time.sleep(0.01)
    go.touch()
    for p in procs:
        _, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr


def replay_is_consistent(reg: Registry) -> None:
    """Every production event names, as previous, what production was right before it in the log."""
    production: str | None = None
    stack: list[str] = []
    for e in reg.events():
        if e.action == "promote":
            assert e.previous == production, f"event {e.seq}: previous {e.previous}, production was {production}"
            stack.append(e.version)
        elif e.action == "rollback":
            assert (e.previous, e.version) == (production, stack[-2]), f"event {e.seq} rolled back from a stale state"
            stack.pop()
        production = e.version if e.alias == "production" else production
    assert reg.aliases().get("production") == (stack[-1] if stack else None) == production
    assert [e.seq for e in reg.events()] == list(range(1, len(reg.events()) + 1))


def test_two_promotions_at_once_record_each_other(tmp_path) -> None:
    for trial in range(TRIALS):
        reg, ids = registry_with(tmp_path / str(trial), 3, promoted=1)
        race(tmp_path, reg, [("promote", ids[1]), ("promote", ids[2])])
        replay_is_consistent(reg)
        promotions = [e for e in reg.events() if e.action == "promote"]
        assert len(promotions) == 3 and {e.previous for e in promotions[1:]} == {ids[0], promotions[1].version}


def test_two_rollbacks_at_once_pop_two_promotions(tmp_path) -> None:
    for trial in range(TRIALS):
        reg, ids = registry_with(tmp_path / str(trial), 3, promoted=3)
        race(tmp_path, reg, [("rollback", ""), ("rollback", "")])
        replay_is_consistent(reg)
        assert reg.aliases()["production"] == ids[0] == reg.production_stack()[-1]
        assert [(e.version, e.previous) for e in reg.events() if e.action == "rollback"] == [(ids[1], ids[2]),
                                                                                              (ids[0], ids[1])]


FIX = "the audit log is damaged; restore this file from a backup (events are append-only, never edit them)"


@pytest.mark.parametrize(("content", "why"), [
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "prom',
     "record: Invalid JSON: EOF while parsing a string at line 1 column 56"),
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "delete", "version": "mv-000000000000"}',
     "action: Input should be 'register', 'promote' or 'rollback'"),
    ('{"seq": 2, "at": "x", "action": "register", "version": "mv-000000000000", "alias": "production"}',
     "record: Value error, a register event moves the candidate alias, not 'production'"),
    (b"\xff\xfe not json", "record: Invalid JSON: expected value at line 1 column 1"),
])
def test_damaged_event_is_one_line_naming_the_file(tmp_path, content, why) -> None:
    reg, _ = registry_with(tmp_path, 1, promoted=0)
    bad = reg.root / "events" / "000002.json"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    proc = subprocess.run([FLYWHEEL, "registry", "list", "--registry", str(reg.root)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"error: {bad} is not a registry event ({why}): {FIX}"]


def test_event_under_another_number_is_one_line(tmp_path) -> None:
    reg, _ = registry_with(tmp_path, 1, promoted=0)
    first = reg.root / "events" / "000001.json"
    (reg.root / "events" / "000007.json").write_bytes(first.read_bytes())  # a copy: seq 1 in file 7
    proc = subprocess.run([FLYWHEEL, "registry", "list", "--registry", str(reg.root)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"error: {reg.root / 'events' / '000007.json'} holds event 1, not the one its name says: {FIX}"]


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_an_adapter_holding_a_symlink_is_refused_and_nothing_is_published(tmp_path, kind) -> None:
    """A link planted in an adapter folder (to a private key, or a folder of them) would be copied through and
    published with the umask's modes: refused in one line, and no version folder is left behind."""
    secret = tmp_path / "secret"
    if kind == "file":
        secret.write_text("key")
    else:
        secret.mkdir()
        (secret / "id_rsa").write_text("key")
    secret.chmod(0o700 if kind == "folder" else 0o600)
    folder = adapter(tmp_path, 1)
    (folder / "extra").symlink_to(secret)
    reg = Registry(tmp_path / "reg")
    with pytest.raises(RegistryError, match="holds a symlink \\(extra\\)"):
        reg.register(folder, FIELDS)
    assert not (tmp_path / "reg" / "versions").exists() or not any((tmp_path / "reg" / "versions").iterdir())
    assert reg.events() == []
