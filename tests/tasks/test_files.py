"""Hostile output targets through the real CLI (`flywheel score`, `flywheel dedupe` as subprocesses) and the writer
itself: a device, a FIFO, a symlink, a folder, a read-only folder, a write that fails half-way, a hard link (split:
the other name keeps the old file), /proc/self/fd of a deleted file, a setuid file and another user's file in a
sticky folder. Each one is written through or refused with one line; the target stays what it was and no temp
file (nor a file named after a /proc link) is left beside it."""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flywheel.tasks.data.seeds import seed_task
from flywheel.tasks.files import open_output, share_tree, write_text_atomic

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")
COMMANDS = ("score", "dedupe")
DEVICE_FULL = "error: cannot write /dev/full: no space left on device; free space or choose another path"


@pytest.fixture
def inputs(tmp_path: Path, catalog) -> Path:
    """One input file per command, in a folder of its own (the output folder is listed in the tests)."""
    tools, seeds = catalog
    task = seed_task(seeds[0], tools)
    call = task.reference.calls[0]
    folder = tmp_path / "in"
    folder.mkdir()
    row = {"task": task.model_dump(mode="json"), "completion": json.dumps({"tool": call.tool, "args": call.args})}
    (folder / "score.jsonl").write_text(json.dumps(row) + "\n")
    (folder / "dedupe.jsonl").write_text("".join(json.dumps({"t": t}) + "\n" for t in ("a b c d", "a b c d", "x y z")))
    return folder


def flywheel(command: str, inputs: Path, output: Path | str, **popen: object) -> subprocess.CompletedProcess:
    args = {"score": ["--verifier", "tool_call"], "dedupe": ["--field", "t"]}[command]
    return subprocess.run([FLYWHEEL, command, *args, "--input", str(inputs / f"{command}.jsonl"),
                           "--output", str(output)],
                          capture_output=True, text=True, timeout=120, **popen)  # type: ignore[call-overload]


def expected_lines(command: str) -> int:
    return {"score": 1, "dedupe": 3}[command]


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return proc.stderr.strip().splitlines()


def dev_leftovers(name: str) -> list[str]:
    return [p for p in os.listdir("/dev") if p.startswith(f".{name}.")]


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_dev_null_is_written_through_and_stays_a_device(command, inputs) -> None:
    before = os.stat("/dev/null")
    proc = flywheel(command, inputs, "/dev/null")
    after = os.stat("/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_mode) == (before.st_rdev, before.st_mode)
    assert dev_leftovers("null") == []


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_dev_full_is_one_line_no_space_and_stays_a_device(command, inputs) -> None:
    before = os.stat("/dev/full")
    proc = flywheel(command, inputs, "/dev/full")
    after = os.stat("/dev/full")
    assert proc.returncode == 1 and error_lines(proc) == [DEVICE_FULL]
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_mode) == (before.st_rdev, before.st_mode)
    assert dev_leftovers("full") == []


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_fifo_with_a_reader_is_written_through(command, inputs, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fifo = out / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader is there before the writer opens
    try:
        proc = flywheel(command, inputs, fifo)
        data = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
    assert proc.returncode == 0, proc.stderr
    assert len(data.splitlines()) == expected_lines(command) and all(json.loads(line) for line in data.splitlines())
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(out) == ["pipe"]


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_fifo_without_a_reader_is_one_line_not_a_hang(command, inputs, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fifo = out / "pipe"
    os.mkfifo(fifo)
    proc = flywheel(command, inputs, fifo)
    assert proc.returncode == 1 and error_lines(proc) == [
        f"error: cannot write {fifo}: it is a FIFO with no reader (or a socket); start the reader first or name a "
        "regular file"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(out) == ["pipe"]


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_symlink_stays_a_link_and_its_target_is_written(command, inputs, tmp_path) -> None:
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    target = out / "data" / "real.jsonl"
    target.write_text("old\n")
    target.chmod(0o640)
    link = out / "link.jsonl"
    link.symlink_to("data/real.jsonl")
    proc = flywheel(command, inputs, link)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == "data/real.jsonl"
    lines = target.read_text().splitlines()
    assert len(lines) == expected_lines(command) and all(json.loads(line) for line in lines)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the existing file's mode is kept
    assert sorted(os.listdir(out)) == ["data", "link.jsonl"] and os.listdir(out / "data") == ["real.jsonl"]


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_directory_as_output_is_one_line(command, inputs, tmp_path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    proc = flywheel(command, inputs, folder)
    lines = error_lines(proc)  # the CLI may refuse before any work (its own wording) or at the write (tasks.files)
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and str(folder) in lines[0]
    assert lines[0].endswith("is a directory; name a file")
    assert folder.is_dir() and os.listdir(folder) == [] and sorted(os.listdir(tmp_path)) == ["in", "out"]
    with pytest.raises(OSError) as err, open_output(folder) as f:  # the writer itself, whoever calls it
        f.write(b"x")
    assert str(err.value) == f"cannot write {folder}: it is a directory; name a file"


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A folder nobody may write into: chmod for a normal user; root ignores modes, so also the immutable flag."""
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "old.jsonl").write_text("old\n")
    folder.chmod(0o555)
    immutable = os.geteuid() == 0
    if immutable and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        folder.chmod(0o755)
        pytest.skip("running as root and chattr +i is not available: a folder cannot be made read-only")
    try:
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_read_only_folder_is_one_line_and_untouched(command, inputs, read_only_dir) -> None:
    target = read_only_dir / "old.jsonl"
    proc = flywheel(command, inputs, target)
    lines = error_lines(proc)  # the CLI may refuse before any work (its own wording) or at the write (tasks.files)
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and str(target) in lines[0]
    assert lines[0].endswith("choose a path you can write")
    assert os.listdir(read_only_dir) == ["old.jsonl"] and target.read_text() == "old\n"
    with pytest.raises(OSError) as err, open_output(target) as f:  # the writer itself, whoever calls it
        f.write(b"x")
    assert str(err.value) == f"cannot write {target}: permission denied; choose a path you can write"
    assert os.listdir(read_only_dir) == ["old.jsonl"] and target.read_text() == "old\n"


@pytest.mark.integration
def test_fifo_in_a_read_only_folder_is_written_through(inputs, tmp_path) -> None:
    """A device or FIFO is written in place, so a folder nobody may create files in does not matter (as /dev for a
    normal user): the CLI's up-front check must not refuse it."""
    folder = tmp_path / "ro-fifo"
    folder.mkdir()
    fifo = folder / "pipe"
    os.mkfifo(fifo)
    folder.chmod(0o555)
    if os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("running as root and chattr +i is not available: a folder cannot be made read-only")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        proc = flywheel("dedupe", inputs, fifo)
        data = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
        folder.chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    assert len(data.splitlines()) == expected_lines("dedupe") and os.listdir(folder) == ["pipe"]


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))  # Python ignores SIGXFSZ: a bigger write fails with EFBIG


@pytest.mark.integration
def test_write_failing_half_way_keeps_the_old_file_and_leaves_no_temp(inputs, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "scored.jsonl"
    target.write_text("old\n")
    proc = flywheel("score", inputs, target, preexec_fn=_limit_file_size)
    assert proc.returncode == 1 and error_lines(proc) == [
        f"error: cannot write {target}: File too large; choose another path"]
    assert os.listdir(out) == ["scored.jsonl"] and target.read_text() == "old\n"


def test_interrupted_write_removes_its_temp_file(tmp_path) -> None:
    target = tmp_path / "report.md"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), open_output(target) as f:
        f.write(b"half")
        raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["report.md"] and target.read_text() == "old\n"


def test_new_file_gets_the_umask_mode_not_the_temp_files(tmp_path) -> None:
    old = os.umask(0o027)
    try:
        with open_output(tmp_path / "new.jsonl") as f:
            f.write(b"x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.jsonl").stat().st_mode) == 0o640 and os.listdir(tmp_path) == ["new.jsonl"]


def test_a_shared_tree_gets_umask_modes_and_its_links_lend_nothing(tmp_path) -> None:
    """What a trainer built in private (mkdtemp 0700, safetensors 0600) is published with the umask's modes; a
    symlink planted in it (to a private file or folder outside) is neither changed nor followed, and a file
    hard-linked from outside keeps its mode under every name; the tree itself given as a link is left alone."""
    secret, vault = tmp_path / "secret", tmp_path / "vault"
    secret.write_text("key")
    secret.chmod(0o600)
    vault.mkdir(mode=0o700)
    (vault / "inner").write_text("x")
    (vault / "inner").chmod(0o600)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    tree.chmod(0o700)
    (tree / "sub").chmod(0o700)
    (tree / "sub" / "adapter_model.safetensors").write_bytes(b"w")
    (tree / "sub" / "adapter_model.safetensors").chmod(0o600)
    (tree / "link").symlink_to(secret)
    (tree / "dirlink").symlink_to(vault)
    os.link(vault / "inner", tree / "hardlink")  # the same file under a name outside the tree
    old = os.umask(0o027)
    try:
        share_tree(tree)
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert (mode(tree), mode(tree / "sub"), mode(tree / "sub" / "adapter_model.safetensors")) == (0o750, 0o750, 0o640)
    assert (mode(secret), mode(vault), mode(vault / "inner")) == (0o600, 0o700, 0o600)
    (tmp_path / "tree-link").symlink_to(vault)
    share_tree(tmp_path / "tree-link")
    assert (mode(vault), mode(vault / "inner")) == (0o700, 0o600)


@pytest.mark.skipif(os.getuid() != 0, reason="making another user's file needs root")
def test_another_users_file_in_a_shared_tree_keeps_its_mode(tmp_path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir(mode=0o700)
    theirs = tree / "theirs"
    theirs.write_text("x")
    theirs.chmod(0o600)
    os.chown(theirs, 65534, 65534)
    share_tree(tree)
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o600 and stat.S_IMODE(tree.stat().st_mode) != 0o700


def test_socket_is_one_line_and_stays_a_socket(tmp_path) -> None:
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(OSError, match=r"^cannot write .*sock: it is a FIFO with no reader \(or a socket\)"):
            with open_output(path) as f:
                f.write(b"x")
        assert stat.S_ISSOCK(os.lstat(path).st_mode) and os.listdir(tmp_path) == ["sock"]


@pytest.mark.integration
@pytest.mark.parametrize("command", COMMANDS)
def test_hard_linked_file_is_split_and_the_other_name_keeps_the_old_file(command, inputs, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    named, other = out / "scored.jsonl", out / "other-name.jsonl"
    named.write_text("old\n")
    os.link(named, other)
    proc = flywheel(command, inputs, named)
    assert proc.returncode == 0, proc.stderr
    lines = named.read_text().splitlines()
    assert len(lines) == expected_lines(command) and all(json.loads(line) for line in lines)
    assert other.read_text() == "old\n"  # atomic replace splits the link: the other name is not touched
    assert (named.stat().st_nlink, other.stat().st_nlink) == (1, 1) and not named.samefile(other)
    assert sorted(os.listdir(out)) == ["other-name.jsonl", "scored.jsonl"]


@pytest.mark.integration
def test_hard_linked_file_failing_half_way_keeps_both_names_and_the_link(inputs, tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    named, other = out / "scored.jsonl", out / "other-name.jsonl"
    named.write_text("old\n")
    os.link(named, other)
    proc = flywheel("score", inputs, named, preexec_fn=_limit_file_size)
    assert proc.returncode == 1 and error_lines(proc) == [
        f"error: cannot write {named}: File too large; choose another path"]
    assert named.read_text() == other.read_text() == "old\n" and named.samefile(other) and named.stat().st_nlink == 2
    assert sorted(os.listdir(out)) == ["other-name.jsonl", "scored.jsonl"]


def test_proc_fd_of_a_deleted_file_is_one_line_and_creates_nothing(tmp_path) -> None:
    gone = tmp_path / "gone.jsonl"
    with open(gone, "w") as held:
        gone.unlink()  # the file lives on only through this descriptor: /proc/self/fd/N -> ".../gone.jsonl (deleted)"
        link = f"/proc/self/fd/{held.fileno()}"
        with pytest.raises(OSError) as err, open_output(link) as f:
            f.write(b"x")
    assert str(err.value) == (f"cannot write {link}: it leads to a file with no path of its own (deleted, or seen "
                              "only through /proc); name the file's real path")
    assert os.listdir(tmp_path) == []  # not a new file named "gone.jsonl (deleted)"


def test_proc_fd_of_a_named_file_writes_that_file(tmp_path) -> None:
    target = tmp_path / "named.jsonl"
    target.write_text("old\n")
    with open(target) as held:
        with open_output(f"/proc/self/fd/{held.fileno()}") as f:
            f.write(b"new\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["named.jsonl"]


def test_setuid_and_setgid_bits_are_not_carried_to_new_content(tmp_path) -> None:
    target = tmp_path / "tool"
    target.write_text("old\n")
    target.chmod(0o6755)
    with open_output(target) as f:
        f.write(b"new\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755 and target.read_text() == "new\n"


@pytest.fixture
def sticky_dir():
    """A world-writable sticky folder (like /tmp) outside pytest's 0700 tree, so another uid can reach it."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="flywheel-sticky-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _as_nobody(write: Callable[[], None]) -> str:
    """Run ``write`` in a forked child as uid/gid 65534; the OSError it raised, or "ok"."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        result = "ok"
        try:
            os.setgid(65534)
            os.setuid(65534)
            write()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, whatever it is
            result = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        finally:
            os.write(write_end, result.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        result = pipe.read().decode()
    os.waitpid(pid, 0)
    return result


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_another_users_file_in_a_sticky_folder_is_refused_not_written_in_place(sticky_dir) -> None:
    target = sticky_dir / "shared.jsonl"
    target.write_text("old\n")
    target.chmod(0o666)  # the second user may write it, but the sticky bit forbids renaming over it
    assert _as_nobody(lambda: write_text_atomic(target, "new\n")) == (
        f"cannot write {target}: permission denied; choose a path you can write")
    assert target.read_text() == "old\n" and target.stat().st_uid == 0 and os.listdir(sticky_dir) == ["shared.jsonl"]


def test_a_damaged_embedded_model_cache_is_one_line_and_left_as_it_was(tmp_path, monkeypatch) -> None:
    """A converted checkpoint only lands whole (a rename), so a cache folder without config.json is damaged, not in
    progress. Before: a conversion ran, was thrown away, and the damaged folder was returned to every load."""
    from flywheel.tasks.inference import models

    monkeypatch.setenv("FLYWHEEL_CACHE", str(tmp_path))
    target = tmp_path / "smollm2-135m-instruct"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"half")
    with pytest.raises(RuntimeError, match=r"smollm2-135m-instruct holds no config.json .*: remove it and rerun"):
        models.embedded_checkpoint()
    assert [p.name for p in tmp_path.iterdir()] == [target.name] and [p.name for p in target.iterdir()] == \
        ["model.safetensors"]


@pytest.mark.slow
def test_two_first_uses_of_the_embedded_model_keep_the_checkpoint_that_landed_first(tmp_path, monkeypatch,
                                                                                     capfd) -> None:
    """Two processes that both found no converted checkpoint each convert it; the second rename landed on the
    first's folder and raised (not empty). Now the second keeps the first's checkpoint and drops its own copy. The
    conversion draws no progress bar on stderr (it broke the CLI's display on a first run)."""
    from flywheel.tasks.inference import models

    converted = models.embedded_checkpoint()  # the real cache's: another process's whole conversion
    monkeypatch.setenv("FLYWHEEL_CACHE", str(tmp_path / "cache"))
    target = tmp_path / "cache" / "smollm2-135m-instruct"
    rename = os.replace

    def another_run_lands_first(src, dst) -> None:
        if Path(dst) == target and not target.exists():
            shutil.copytree(converted, target)
            (target / "landed-first").write_text("")
        rename(src, dst)

    monkeypatch.setattr(os, "replace", another_run_lands_first)
    assert models.embedded_checkpoint() == target
    assert (target / "landed-first").is_file() and [p.name for p in target.parent.iterdir()] == [target.name]
    assert (target / "config.json").read_bytes() == (converted / "config.json").read_bytes()
    assert "GGUF tensors" not in capfd.readouterr().err


def test_a_landing_on_a_damaged_cache_folder_raises_and_keeps_both(tmp_path) -> None:
    """The rename fails because a folder appeared at the target since the check, and it holds no config.json: that
    is not another run's whole checkpoint, so the error goes up (the caller drops its own copy) and the folder that
    appeared is left as it was."""
    from flywheel.tasks.inference import embedded

    tmp, target = tmp_path / ".convert-x", tmp_path / "smollm2-135m-instruct"
    tmp.mkdir()
    (tmp / "config.json").write_text("{}")
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"half")
    with pytest.raises(OSError):
        embedded._land(tmp, target)
    assert [p.name for p in target.iterdir()] == ["model.safetensors"] and (tmp / "config.json").is_file()
