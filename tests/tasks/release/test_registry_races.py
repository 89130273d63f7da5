"""Registry races and a damaged audit log: two real processes promote (or roll back) at the same moment, repeated;
the event log must stay the truth (each promote's `previous` is production right before it; alias and promotion
history agree). A damaged event file is one line from `flywheel registry list`, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flywheel.tasks.release.registry as registry_module
from conftest import REGISTRY_FIELDS, fake_adapter
from flywheel.tasks.release.registry import Registry, RegistryError

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")
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
if action == "register":
    reg.register(Path(ref), {"name": "p", "base_model": {}, "dataset": {}, "verifiers": {}, "training": {}})
else:
    reg.promote(ref, {"passed": True}) if action == "promote" else reg.rollback()
"""


def registry_with(tmp_path: Path, n: int, promoted: int) -> tuple[Registry, list[str]]:
    reg = Registry(tmp_path / "registry")
    ids = [reg.register(fake_adapter(tmp_path / "adapters", i), REGISTRY_FIELDS).id for i in range(n)]
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


@pytest.mark.integration
def test_two_promotions_at_once_record_each_other(tmp_path) -> None:
    for trial in range(TRIALS):
        reg, ids = registry_with(tmp_path / str(trial), 3, promoted=1)
        race(tmp_path, reg, [("promote", ids[1]), ("promote", ids[2])])
        replay_is_consistent(reg)
        promotions = [e for e in reg.events() if e.action == "promote"]
        assert len(promotions) == 3 and {e.previous for e in promotions[1:]} == {ids[0], promotions[1].version}


@pytest.mark.integration
def test_two_rollbacks_at_once_pop_two_promotions(tmp_path) -> None:
    for trial in range(TRIALS):
        reg, ids = registry_with(tmp_path / str(trial), 3, promoted=3)
        race(tmp_path, reg, [("rollback", ""), ("rollback", "")])
        replay_is_consistent(reg)
        assert reg.aliases()["production"] == ids[0] == reg.production_stack()[-1]
        assert [(e.version, e.previous) for e in reg.events() if e.action == "rollback"] == [(ids[1], ids[2]),
                                                                                              (ids[0], ids[1])]


FIX = "the audit log is damaged; restore this file from a backup (events are append-only, never edit them)"


@pytest.mark.integration
@pytest.mark.parametrize(("content", "why"), [
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "prom',
     "is not strict JSON (unexpected end of data: line 1 column 57 (char 56))"),
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "register", "version": "mv-000000000000", "gate": NaN}',
     "is not strict JSON (unexpected character, expected a JSON value: line 1 column 102 (char 101))"),
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "delete", "version": "mv-000000000000"}',
     "is not a registry event (action: Input should be 'register', 'promote' or 'rollback')"),
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "register", "version": "mv-000000000000", '
     '"alias": "production"}',
     "is not a registry event (record: Value error, a register event moves the candidate alias, not 'production')"),
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "register", "version": "../../../outside/x", '
     '"alias": "candidate"}', "is not a registry event (version: String should match pattern '^mv-[0-9a-f]{12}$')"),
    ('{"seq": 2, "at": "2025-01-01T00:00:00Z", "action": "register", "version": "mv-000000000000", '
     '"alias": "candidate", "actor": "alice\\n   7 2026-01-01T00:00:00Z bob promote"}',
     "is not a registry event (actor: String should match pattern '^[^\\x00-\\x1f\\x7f-\\x9f]*$')"),
    (b"\xff\xfe not json", "is not strict JSON (str is not valid UTF-8: surrogates not allowed: line 1 column 1 "
                           "(char 0))"),
])
def test_damaged_event_is_one_line_naming_the_file(tmp_path, content, why) -> None:
    reg, _ = registry_with(tmp_path, 1, promoted=0)
    bad = reg.root / "events" / "000002.json"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    proc = subprocess.run([FLYWHEEL, "registry", "list", "--registry", str(reg.root)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"error: {bad} {why}: {FIX}"]


@pytest.mark.integration
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
    folder = fake_adapter(tmp_path, 1)
    (folder / "extra").symlink_to(secret)
    reg = Registry(tmp_path / "reg")
    with pytest.raises(RegistryError, match="holds a symlink \\(extra\\)"):
        reg.register(folder, REGISTRY_FIELDS)
    assert not (tmp_path / "reg" / "versions").exists() or not any((tmp_path / "reg" / "versions").iterdir())
    assert reg.events() == []


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([FLYWHEEL, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def one_line(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in proc.stderr, proc.stderr


def event(seq: int, action: str, version: str, **fields: object) -> str:
    alias = "candidate" if action == "register" else "production"
    return json.dumps({"seq": seq, "at": "2026-01-01T00:00:00Z", "action": action, "version": version,
                       "alias": alias, **fields})


@pytest.mark.integration
@pytest.mark.parametrize("damage", ["gap", "unregistered", "rollback_elsewhere"])
def test_a_log_that_contradicts_itself_is_one_line_not_replayed(tmp_path, damage) -> None:
    """Before: a missing event, a promotion of a version never registered and a rollback to an arbitrary version
    were replayed without a word (production pointed at nothing; `list` and `rollback` disagreed)."""
    reg, ids = registry_with(tmp_path, 3, promoted=2)  # events 1-3 register, 4-5 promote
    events = reg.root / "events"
    if damage == "gap":
        (events / "000004.json").unlink()
        fragment = f"event 4 is missing from {events} (the log goes on at 5)"
    elif damage == "unregistered":
        (events / "000006.json").write_text(event(6, "promote", "mv-ffffffffffff", previous=ids[1]))
        fragment = "000006.json promotes mv-ffffffffffff, which no earlier event registered"
    else:
        (events / "000006.json").write_text(event(6, "rollback", ids[2], previous=ids[1]))
        fragment = f"000006.json rolls production back to {ids[2]} from {ids[1]}, but the promotions before it say"
    for command in (["registry", "list"], ["rollback"], ["registry", "show"]):
        one_line(cli(*command, "--registry", str(reg.root)), fragment)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
def test_an_event_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path, kind) -> None:
    """Before: a FIFO hung `registry list` for ever and /dev/zero (or a 400 MB event) ate the machine's memory."""
    reg, _ = registry_with(tmp_path, 1, promoted=0)
    bad = reg.root / "events" / "000002.json"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "dev_zero":
        bad.symlink_to("/dev/zero")
    else:
        bad.write_text(event(2, "register", "mv-000000000000", gate={"pad": "A" * (2 << 20)}))
    why = {"fifo": "not a regular file", "dev_zero": "a symlink, not a regular file", "huge": "larger than 1024 KB"}
    one_line(cli("registry", "list", "--registry", str(reg.root)), f"{bad} cannot be read ({why[kind]})")


@pytest.mark.integration
@pytest.mark.parametrize("lock", ["fifo", "symlink"])
def test_a_lock_file_swapped_for_a_fifo_or_a_link_is_refused_and_nothing_outside_is_made(tmp_path, lock) -> None:
    """Before: a FIFO .lock hung `rollback` for ever, and a .lock symlink made rollback create its target."""
    reg, _ = registry_with(tmp_path, 2, promoted=2)
    outside = tmp_path / "outside" / "made-by-lock"
    outside.parent.mkdir()
    (reg.root / ".lock").unlink()
    os.mkfifo(reg.root / ".lock") if lock == "fifo" else (reg.root / ".lock").symlink_to(outside)
    one_line(cli("rollback", "--registry", str(reg.root)), f"{reg.root / '.lock'} ")
    assert not outside.exists() and len(reg.events()) == 4


def test_a_lock_held_past_the_wait_is_an_error_naming_it_not_a_silent_hang(tmp_path, monkeypatch) -> None:
    import fcntl

    reg, _ = registry_with(tmp_path, 2, promoted=2)
    monkeypatch.setattr(registry_module, "LOCK_WAIT_S", 0.5)
    with open(reg.root / ".lock", "a") as held:  # another open file description: flock conflicts in-process too
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RegistryError, match="has been held by another process for 0.5 s"):
            reg.rollback()
    assert reg.rollback().version == reg.production_stack()[-1]  # released: the next change goes through


@pytest.mark.integration
def test_commands_on_a_registry_that_is_not_there_say_so_and_create_nothing(tmp_path) -> None:
    typo = tmp_path / "typo" / "deep" / "registry"
    one_line(cli("registry", "list", "--registry", str(typo)), f"no registry at {typo}")
    one_line(cli("rollback", "--registry", str(typo)), f"no registry at {typo}")
    assert not (tmp_path / "typo").exists()
    reg, _ = registry_with(tmp_path / "r", 1, promoted=0)
    (reg.root / "events" / "000001.json").unlink()
    (reg.root / "events").rmdir()
    (reg.root / "events").write_text("junk")
    one_line(cli("registry", "list", "--registry", str(reg.root)), f"{reg.root / 'events'} is not a folder")


@pytest.mark.integration
def test_logname_cannot_forge_a_line_of_the_audit_log(tmp_path) -> None:
    reg, _ = registry_with(tmp_path, 2, promoted=2)
    forged = "alice\n   7 2026-01-01T00:00:00Z bob      promote  mv-000000000000 production\x1b[2J"
    proc = cli("rollback", "--registry", str(reg.root), env={"LOGNAME": forged})
    assert proc.returncode == 0, proc.stderr
    assert reg.events()[-1].actor == "alice?   7 2026-01-01T00:00:00Z bob      promote  mv-000000000000 production?[2J"
    listing = cli("registry", "list", "--registry", str(reg.root)).stdout.splitlines()
    assert len(listing) == 6 and "\x1b" not in "".join(listing)  # five events and the aliases


@pytest.mark.integration
@pytest.mark.parametrize(("edit", "fragment"), [
    ({"adapter": "../../../../outside/secret_adapter"}, "adapter: Value error, '../../../../outside/secret_adapter' "
                                                        "is not a path inside the version folder"),
    ({"eval_report": "/etc/passwd"}, "eval_report: Value error, '/etc/passwd' is not a path inside the version"),
    ({"files": {"/etc/passwd": "0" * 64}}, "files./etc/passwd.[key]: Value error, '/etc/passwd' is not a path inside"),
    ({"parent": "../../x"}, "parent: String should match pattern"),
    ({"id": "mv-0123456789ab"}, "holds version mv-0123456789ab, not the one its folder names"),
    ({"metrics": float("nan")}, "is not strict JSON"),
])
def test_a_tampered_version_record_is_one_line_naming_it_and_never_read_through(tmp_path, edit, fragment) -> None:
    """Before: a version.json could point the registry's reads (show, export, the gate's baseline) outside the
    registry, or show another version's record under this one's id."""
    reg, ids = registry_with(tmp_path, 1, promoted=0)
    record = reg.root / "versions" / ids[0] / "version.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), **edit}))
    for command in (["registry", "show", "candidate"], ["registry", "export", "candidate", "--out",
                                                         str(tmp_path / "exp")]):
        one_line(cli(*command, "--registry", str(reg.root)), f"{record} ")
        assert fragment in cli(*command, "--registry", str(reg.root)).stderr
    assert not (tmp_path / "exp").exists()


@pytest.mark.integration
def test_a_damaged_parent_is_one_line_from_registry_show(tmp_path) -> None:
    reg, ids = registry_with(tmp_path, 2, promoted=0)
    child = reg.root / "versions" / ids[1] / "version.json"
    child.write_text(json.dumps({**json.loads(child.read_text()), "parent": ids[0]}))
    parent = reg.root / "versions" / ids[0] / "version.json"
    parent.write_text(json.dumps({**json.loads(parent.read_text()), "training": {"config": "x"}}))
    shown = json.loads(cli("registry", "show", ids[1], "--registry", str(reg.root)).stdout)
    assert shown["ancestry"][0]["method"] is None  # a config that is not an object: no method, not a crash
    parent.write_text("{broken")
    one_line(cli("registry", "show", ids[1], "--registry", str(reg.root)), f"{parent} is not strict JSON")


@pytest.mark.integration
@pytest.mark.parametrize("link", ["version_folder", "adapter_file"])
def test_files_reached_through_a_symlink_are_not_intact_and_not_exported(tmp_path, link) -> None:
    """Before: a version folder (or one of its files) replaced by a link to an identical copy elsewhere still read
    as intact, and export loaded what the link named."""
    reg, ids = registry_with(tmp_path, 1, promoted=0)
    folder = reg.root / "versions" / ids[0]
    if link == "version_folder":
        elsewhere = tmp_path / "elsewhere"
        folder.rename(elsewhere)
        folder.symlink_to(elsewhere)
    else:
        config = folder / "adapter" / "adapter_config.json"
        elsewhere = tmp_path / "elsewhere.json"
        config.rename(elsewhere)
        config.symlink_to(elsewhere)
    shown = json.loads(cli("registry", "show", "--registry", str(reg.root), "candidate").stdout)
    assert shown["files_intact"] is False
    one_line(cli("registry", "export", "candidate", "--out", str(tmp_path / "exp"), "--registry", str(reg.root)),
             "files changed since registration")


@pytest.mark.integration
def test_two_registers_of_the_same_adapter_at_once_both_succeed(tmp_path) -> None:
    """Before: the second rename failed with a raw 'Directory not empty' (3 of 3 tries with a 50 MB adapter)."""
    for trial in range(TRIALS):
        folder = fake_adapter(tmp_path / f"a{trial}", trial)
        (folder / "adapter_model.safetensors").write_bytes(os.urandom(16 << 20))
        reg = Registry(tmp_path / f"r{trial}")
        race(tmp_path, reg, [("register", str(folder)), ("register", str(folder))])
        assert [e.action for e in reg.events()] == ["register", "register"]
        assert len({e.version for e in reg.events()}) == 1
        assert not [p for p in (reg.root / "versions").iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.integration
def test_promote_refuses_a_blank_override_and_an_unwritable_gates_folder_before_any_flow(tmp_path) -> None:
    """Before: `--override "   "` and a file named gates printed a Prefect traceback from inside the flow."""
    reg, _ = registry_with(tmp_path, 1, promoted=0)
    evals = ["--baseline-eval", str(tmp_path / "no-base"), "--candidate-eval", str(tmp_path / "no-cand")]
    one_line(cli("promote", "--registry", str(reg.root), *evals, "--override", "   "),
             "--override needs a reason: it goes into the audit log")
    (reg.root / "gates").write_text("x")
    one_line(cli("promote", "--registry", str(reg.root), *evals), f"--registry {reg.root / 'gates'} is a file")


def test_a_promotion_gated_against_a_production_that_moved_meanwhile_is_refused(tmp_path) -> None:
    """Before: promote without --baseline-eval read production's eval outside the lock; a rollback in the ~10 s
    before the alias moved made the gate's comparison stale, and the candidate was promoted on it anyway."""
    reg, ids = registry_with(tmp_path, 3, promoted=2)  # production: ids[1], gated against its eval
    reg.rollback()  # another command, meanwhile: production is ids[0] now
    before = sorted(p.name for p in (reg.root / "events").iterdir())
    with pytest.raises(RegistryError, match=f"production moved from {ids[1]} to {ids[0]} while {ids[2]} was gated "
                                            f"against {ids[1]}'s eval: nothing promoted; run promote again"):
        reg.promote(ids[2], {"passed": True}, gated_against=ids[1])
    assert sorted(p.name for p in (reg.root / "events").iterdir()) == before
    assert reg.aliases()["production"] == ids[0]
    assert reg.promote(ids[2], {"passed": True}, gated_against=ids[0]).previous == ids[0]  # gated on the current one
