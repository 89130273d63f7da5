"""One namespace (issue 14): Flywheel installs as flywheel.flows/tasks/verifiers/schemas, never as bare top-level
names.

Proves, with real installs and no network at test time:
- PrimeIntellect's ``verifiers`` 0.4.0 (wheel fetched by deploy/install.sh into .wheels/, sha256 pinned below) is what
  ``import verifiers`` gives, while the CLI, the Prefect deployments and every project module keep working;
- a non-editable ``pip install`` of a clean copy of the repository into a fresh venv (beside theirs) ships every
  module and data file of the source tree and runs ``flywheel generate`` from outside the repository;
- no source file imports a bare ``flows``/``tasks``/``verifiers``/``schemas``, and imports point one way
  (flows -> tasks -> verifiers -> schemas) with no module import cycles.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import running

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("flows", "tasks", "verifiers", "schemas")  # each may import only itself and the layers after it
SCANNED = (*LAYERS, "tests", "scripts", "bench")
WHEEL = REPO / ".wheels" / "verifiers-0.4.0-py3-none-any.whl"
WHEEL_SHA256 = "cf73b3089c12ff1e2471130153cfa93cfe9beb8b49abfb2ceb917658d99fefe2"  # PyPI's verifiers 0.4.0

def module_name(path: Path) -> str | None:
    """flows/cli/x.py -> flywheel.flows.cli.x (a package's __init__ -> the package); None outside the layers."""
    rel = path.relative_to(REPO).with_suffix("")
    if rel.parts[0] not in LAYERS:
        return None
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(("flywheel", *parts))


def py_files(tops: tuple[str, ...]) -> list[Path]:
    return sorted(p for top in tops for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def imports(path: Path) -> list[tuple[str, int]]:
    """Every imported absolute module name in PATH (module and function level, relative imports resolved; also
    constant strings passed to import_module/__import__), with its line."""
    tree = ast.parse(path.read_bytes(), str(path))
    mod = module_name(path) or ""
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                base = ".".join([*anchor, *([base] if base else [])])
            found += [(f"{base}.{a.name}", node.lineno) for a in node.names if a.name != "*"] or [(base, node.lineno)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.args[0].value, node.lineno))
    return found


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


def test_no_bare_top_level_imports() -> None:
    bad = [f"{where(p, line)}: {name}" for p in py_files(SCANNED) for name, line in imports(p)
           if name.split(".")[0] in LAYERS]
    assert not bad, "bare imports (use flywheel.X):\n" + "\n".join(bad)


def graph() -> dict[str, dict[str, str]]:
    """importer module -> {imported project module: file:line}; `from pkg import sub` points at pkg.sub if it is a
    module, else at pkg."""
    files = {module_name(p): p for p in py_files(LAYERS)}
    edges: dict[str, dict[str, str]] = {m: {} for m in files}
    for mod, path in files.items():
        for name, line in imports(path):
            target = name if name in files else name.rpartition(".")[0]
            if target in files and target != mod:
                edges[mod].setdefault(target, where(path, line))
    return edges


def layer(mod: str) -> int:
    return LAYERS.index(mod.split(".")[1])


def upward() -> dict[tuple[str, str], str]:
    return {(src, dst): at for src, out in graph().items() for dst, at in out.items() if layer(dst) < layer(src)}


def test_layers_point_one_way() -> None:
    bad = [f"{at}: {src} imports {dst}" for (src, dst), at in upward().items()]
    assert not bad, "imports against flows -> tasks -> verifiers -> schemas:\n" + "\n".join(bad)


def cycles() -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative enough for this size)."""
    edges, index, low, stack, on, out = graph(), {}, {}, [], set(), []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    edges = graph()
    bad = [", ".join(f"{edges[a][b]} ({a} -> {b})" for a in sorted(c) for b in edges[a] if b in c)
           for c in cycles()]
    assert not bad, "import cycles:\n" + "\n".join(bad)


# --- real installs (slow) -------------------------------------------------------------------------------------------

def wheel() -> Path:
    assert WHEEL.is_file(), f"{WHEEL} missing: run deploy/install.sh (it fetches the wheel; tests download nothing)"
    assert hashlib.sha256(WHEEL.read_bytes()).hexdigest() == WHEEL_SHA256, f"{WHEEL} is not PyPI's verifiers 0.4.0"
    return WHEEL


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 240) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PREFECT_API"))}
    return {**env, "PREFECT_HOME": str(tmp / "prefect-home"), **extra}


# Run in the environment under test: `import verifiers` is theirs, the deployments load (the real scripts, not
# prefect's AST placeholder) from the repository root as a worker would, and no project module is ever loaded under a
# bare name (cwd on sys.path would otherwise hide a bare import). -P: like a console script, the cwd is not on
# sys.path (a process that has the repository root on sys.path gets our source folder for `import verifiers`).
PROBE = r"""
import importlib, importlib.metadata as md, sys, yaml
from pathlib import Path
from prefect.flows import load_flow_from_entrypoint
root, expect_pkg = Path(sys.argv[1]), sys.argv[2]
import verifiers  # before the loads: prefect leaves the repository root on sys.path, where verifiers/ is ours
theirs = verifiers
for d in yaml.safe_load((root / "deploy" / "prefect.yaml").read_text())["deployments"]:
    assert load_flow_from_entrypoint(d["entrypoint"], use_placeholder_flow=False).fn, d["entrypoint"]
bare = [m for m, v in sys.modules.items() if m.split(".")[0] in ("flows", "tasks", "verifiers", "schemas")
        and str(getattr(v, "__file__", "") or "").startswith(str(root / m.split(".")[0]) + "/")]
assert not bare, f"project modules loaded under bare names: {bare}"
import verifiers
assert verifiers is theirs and md.version("verifiers") == verifiers.__version__ == "0.4.0", verifiers.__version__
for layer in ("flows", "tasks", "verifiers", "schemas"):
    pkg_dir = Path(importlib.import_module("flywheel." + layer).__file__).parent
    assert str(pkg_dir).startswith(expect_pkg), (pkg_dir, expect_pkg)
    for f in sorted(pkg_dir.rglob("*.py")):
        rel = f.relative_to(pkg_dir.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if rel.name != "__main__" and rel.parts != ("verifiers", "harness"):  # scripts: they run on import
            importlib.import_module(".".join(("flywheel", *parts)))
print(verifiers.__file__)
"""


def score_reference(flywheel: Path, outside: Path, env: dict[str, str], task: dict) -> None:
    """`flywheel score` on one row answering TASK with its reference call: reward 1.0."""
    call = task["reference"]["calls"][0]
    row = {"task": task, "completion": json.dumps({"tool": call["tool"], "args": call["args"]})}
    (outside / "row.jsonl").write_text(json.dumps(row) + "\n")
    run([str(flywheel), "score", "--verifier", "tool_call", "--input", "row.jsonl", "--output", "s.jsonl"],
        outside, env)
    assert json.loads((outside / "s.jsonl").read_text())["verdict"]["reward"] == 1.0


def generate_and_score(flywheel: Path, outside: Path, env: dict[str, str]) -> None:
    """`flywheel --help`, `generate` (seeds and tool catalogs found as package data) and `score` on one real row."""
    assert "generate" in run([str(flywheel), "--help"], outside, env)
    run([str(flywheel), "generate", "--env", "tool_call", "--n", "20", "--seed", "1", "--out", "ds"], outside, env)
    manifest = next((outside / "ds").glob("tool_call/v-*/manifest.json"))
    assert json.loads(manifest.read_text())["counts"]["train"] == 20
    import polars as pl

    score_reference(flywheel, outside, env, json.loads(pl.read_parquet(manifest.parent / "train.parquet")["task"][0]))


@pytest.mark.slow
def test_theirs_verifiers_beside_the_editable_install(tmp_path) -> None:
    """The dev/CI environment (.venv, editable) with their package first on sys.path (the wheel, zip-imported)."""
    env = clean_env(tmp_path, PYTHONPATH=str(wheel()))
    outside = tmp_path / "outside"
    outside.mkdir()
    probe = run([sys.executable, "-P", "-c", PROBE, str(REPO), str(REPO)], REPO, env)
    assert probe.strip() == f"{WHEEL}/verifiers/__init__.py"
    # `flywheel generate` from outside the repository runs in the non-editable test below; here the CLI and `score`
    from flywheel.tasks.data.generate import generate_candidates
    from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools

    seeds_path, tools_path = env_paths("tool_call")
    tools = load_tools(tools_path)
    rows, _ = generate_candidates(range(1), load_seeds(seeds_path, tools), tools, 1)
    flywheel = Path(sys.executable).parent / "flywheel"
    assert "generate" in run([str(flywheel), "--help"], outside, env)
    score_reference(flywheel, outside, env, json.loads(rows[0]["task"]))


def source_tree(root: Path) -> set[str]:
    """Module and data files (.py, .json, .jsonl) of the four layers, as paths inside the installed package."""
    return {f"{top}/{p.relative_to(root / top)}" for top in LAYERS for p in (root / top).rglob("*")
            if p.suffix in (".py", ".json", ".jsonl") and "__pycache__" not in p.parts}


@pytest.mark.slow
def test_non_editable_install_in_a_fresh_venv_beside_theirs(tmp_path) -> None:
    """`pip install .` (not editable) of a clean copy into a fresh venv that already holds theirs."""
    copy, venv, outside = tmp_path / "repo", tmp_path / "venv", tmp_path / "outside"
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO, dict(os.environ))
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_symlink():  # src/flywheel/*: links to the source folders, copied as links
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            (copy / rel).symlink_to(os.readlink(REPO / rel))
        elif (REPO / rel).is_file():  # a path deleted in the working tree is not shipped
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            (copy / rel).write_bytes((REPO / rel).read_bytes())
    outside.mkdir()
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, clean_env(tmp_path))
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "_flywheel_deps.pth").write_text(deps + "\n")  # reuse .venv's dependencies (pip, setuptools included)
    env, py = clean_env(tmp_path), str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation"]
    run([*pip, str(wheel())], tmp_path, env)
    theirs = (site / "verifiers" / "__init__.py").read_bytes()
    run([*pip, str(copy)], tmp_path, env)
    assert (site / "verifiers" / "__init__.py").read_bytes() == theirs, "installing flywheel overwrote theirs"
    ours = set((site / "flywheel-0.1.0.dist-info" / "RECORD").read_text().splitlines())
    clash = {r.split(",")[0] for r in ours} & {r.split(",")[0] for r in
                                             (site / "verifiers-0.4.0.dist-info" / "RECORD").read_text().splitlines()}
    assert not clash, f"files both packages install: {sorted(clash)}"
    missing = sorted(source_tree(copy) - source_tree(site / "flywheel"))
    assert not missing, f"not installed (a subpackage missing from pyproject's packages list?): {missing}"
    probe = run([py, "-P", "-c", PROBE, str(copy), str(site)], copy, env)
    assert probe.strip() == str(site / "verifiers" / "__init__.py")
    generate_and_score(venv / "bin" / "flywheel", outside, env)


@pytest.mark.parametrize("option", ["--with-vlm", "--no-vllm", "vllm"])
def test_install_refuses_an_unknown_option_before_it_installs_anything(tmp_path, option: str) -> None:
    """README's install builds .venv and .venv-vllm; a mistyped option (meant to skip vLLM, say) is one clear line
    and exit 1, not a silent 5 GB install of what the user tried to leave out."""
    (tmp_path / "deploy").mkdir()
    script = tmp_path / "deploy" / "install.sh"
    script.write_bytes((REPO / "deploy" / "install.sh").read_bytes())
    done = subprocess.run(["bash", str(script), option], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == f"install.sh: unknown option '{option}' (options: --without-vllm, to skip vLLM)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deploy"]  # no venv, no wheel folder made


BAD_NUMBERS = [("--gpu-slots", v, "from 1 to 9999") for v in ("0", "x", "01", "10000", "")] + \
              [("--port", v, "from 1 to 65535") for v in ("0", "x", "080", "65536", "")]


@pytest.mark.parametrize(("option", "value", "bounds"), BAD_NUMBERS)
def test_start_refuses_a_bad_number_before_it_starts_anything(tmp_path, option: str, value: str, bounds: str) -> None:
    """deploy/start.sh --gpu-slots takes 1 to 9999 and --port 1 to 65535: anything else is one clear line and exit 2,
    before a home folder, a server or a worker exists."""
    home = tmp_path / "home"
    done = subprocess.run(["bash", str(REPO / "deploy" / "start.sh"), "--home", str(home), option, value],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == f"{option} must be a whole number {bounds}, got '{value}'"
    assert not home.exists()


def test_start_refuses_a_port_another_program_holds_and_sends_it_nothing(tmp_path) -> None:
    """Something answering on --port (another home's Prefect server) passed start.sh's health check for a server that
    could not bind the port, and this home's work pools, gpu limit, deployments and workers went to that server.
    start.sh now refuses before it writes env.sh or launches anything: the server here, which answers every GET
    with 200 as a healthy Prefect would, gets no request at all."""
    import http.server
    import threading

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            requests.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"true")

        do_POST = do_PUT = do_PATCH = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    requests: list[str] = []
    home = tmp_path / "home"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        done = subprocess.run(["bash", str(REPO / "deploy" / "start.sh"), "--home", str(home), "--port", str(port)],
                              capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
        stop = ["bash", str(REPO / "deploy" / "stop.sh"), "--home", str(home)]
        subprocess.run(stop, capture_output=True, timeout=120)  # the old start.sh launched workers
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == (f"port {port} on 127.0.0.1 is in use by another program (another home's Prefect "
                                   "server?): nothing started; pass --port with a free port")
    assert requests == [] and not done.stdout
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == ["logs"]  # no env.sh, no pid file


def fake_process(args: str, flywheel_home: Path, session: bool = True, before: str = "") -> subprocess.Popen:
    """`sleep 300` named ``args`` (what stop.sh reads in /proc/PID/cmdline), for ``flywheel_home``, after the shell
    code ``before``; returned once bash has exec'd it: before that the pid still reads as bash, and stop.sh rightly
    takes it for a stale pid (under CI's load a stop.sh run could come first)."""
    env = {**os.environ, "FLYWHEEL_HOME": str(flywheel_home)}
    proc = subprocess.Popen(["bash", "-c", before + 'exec -a "$0" sleep 300', args], env=env,
                            start_new_session=session)
    cmdline, deadline = Path(f"/proc/{proc.pid}/cmdline"), time.monotonic() + 30
    while not cmdline.read_bytes().startswith(args.encode() + b"\0"):
        assert time.monotonic() < deadline, f"{args!r} did not start within 30 s"
        time.sleep(0.01)
    return proc


def test_stop_signals_only_the_processes_start_launched_whatever_the_pid_files_say(tmp_path) -> None:
    """A pid file outlives its process (a reboot, kill -9) and the pid can be reused: deploy/stop.sh signals a pid only
    while it leads its own session running `prefect worker|server start` for this home (what start.sh launched); any
    other pid file is removed with a line saying so, and its process left alone."""
    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()

    fake = fake_process
    worker = "/venv/bin/python /venv/bin/prefect worker start --pool cpu"
    ours = fake(worker, home)
    reused = subprocess.Popen(["sleep", "300"], start_new_session=True)  # another program, its own session
    posing = fake(worker, home, session=False)  # the right name and home, not a session leader
    elsewhere = fake("/venv/bin/python /venv/bin/prefect server start", other)  # another home's server
    dead = subprocess.Popen(["true"])
    dead.wait()
    files = {"worker-cpu": ours.pid, "worker-gpu": posing.pid, "server": reused.pid}
    stop = ["bash", str(REPO / "deploy" / "stop.sh"), "--home", str(home)]
    try:
        for name, pid in files.items():
            (home / f"{name}.pid").write_text(f"{pid}\n")
        done = subprocess.run(stop, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "stopped the Prefect stack" in done.stdout, done.stdout + done.stderr
        assert ours.wait(timeout=10) == -2  # SIGINT, as a worker is stopped
        assert reused.poll() is None and posing.poll() is None  # never signalled
        assert f"server.pid names pid {reused.pid}, not this home's prefect server" in done.stderr
        assert not list(home.glob("*.pid"))
        cases = (("server", f"{elsewhere.pid}\n"), ("worker-cpu", f"{dead.pid}\n"), ("worker-gpu", "12ab\n"))
        for name, text in cases:  # another home's, a pid no process has, garbage: removed, nothing signalled
            (home / f"{name}.pid").write_text(text)
        again = subprocess.run(stop, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and not list(home.glob("*.pid")), again.stderr
        assert again.stderr.count("a stale pid file, removed; nothing signalled") == 3, again.stderr
        assert reused.poll() is None and posing.poll() is None and elsewhere.poll() is None
    finally:
        for proc in (ours, reused, posing, elsewhere):
            proc.kill()
            proc.wait()


def test_stop_kills_what_outlives_the_grace(tmp_path) -> None:
    """A worker busy with a flow run that does not end on SIGINT, and a server that ignores SIGTERM, are each given
    --grace seconds, then SIGKILLed with their whole process group (the flow run too); the pid files go."""
    home = tmp_path / "home"
    home.mkdir()
    ignore = "trap '' INT TERM; sleep 300 & "  # ignored signals stay ignored across exec; the child: a flow run
    worker = fake_process("/v/bin/python /v/bin/prefect worker start --pool cpu", home, before=ignore)
    server = fake_process("/v/bin/python /v/bin/prefect server start", home, before=ignore)
    flow_run = int(subprocess.run(["ps", "-o", "pid=", "--ppid", str(worker.pid)], capture_output=True,
                                  text=True).stdout.split()[0])
    try:
        for name, proc in (("worker-cpu", worker), ("server", server)):
            (home / f"{name}.pid").write_text(f"{proc.pid}\n")
        started = time.monotonic()
        done = subprocess.run(["bash", str(REPO / "deploy" / "stop.sh"), "--home", str(home), "--grace", "1"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and not done.stderr, done.stdout + done.stderr
        assert time.monotonic() - started >= 2  # a grace for the workers, then one for the server
        assert worker.wait(timeout=10) == -9 and server.wait(timeout=10) == -9
        deadline = time.monotonic() + 10
        while running(flow_run):
            assert time.monotonic() < deadline, "the worker's flow run outlived the SIGKILL of its group"
            time.sleep(0.05)
        assert not list(home.glob("*.pid"))
    finally:
        for proc in (worker, server):
            proc.kill()
            proc.wait()
        subprocess.run(["kill", "-KILL", str(flow_run)], capture_output=True)


GRACE = "--grace must be a whole number of seconds from 1 to 3600, got"
BAD_STOPS = [([o], f"unknown option {o} (usage: deploy/stop.sh [--home DIR] [--grace SECONDS])")
             for o in ("--help", "--hme", "-h")] + \
            [(["--grace", *v], f"{GRACE} '{(v or [''])[0]}'") for v in ([], ["0"], ["x"], ["05"], ["3601"], ["-1"])]


@pytest.mark.parametrize(("options", "message"), BAD_STOPS)
def test_stop_refuses_an_unknown_option_and_stops_nothing(tmp_path, options: list[str], message: str) -> None:
    """deploy/stop.sh takes only --home DIR and --grace SECONDS (1 to 3600): a mistyped option or a bad grace is one
    line and exit 2, not a stop of the default home (./flywheel-home), whose running process and pid file stay."""
    home = tmp_path / "flywheel-home"
    home.mkdir()
    worker = fake_process("/v/bin/python /v/bin/prefect worker start", home)
    try:
        (home / "worker-cpu.pid").write_text(f"{worker.pid}\n")
        done = subprocess.run(["bash", str(REPO / "deploy" / "stop.sh"), *options], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and not done.stdout, done.stdout + done.stderr
        assert done.stderr.strip() == message
        assert worker.poll() is None and (home / "worker-cpu.pid").exists()
        stopped = subprocess.run(["bash", str(REPO / "deploy" / "stop.sh")], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0 and worker.wait(timeout=10) == -2  # no option: the default home is stopped
    finally:
        worker.kill()
        worker.wait()
