"""vLLM in its own virtual environment, driven from the flow's process over a pipe.

vLLM's CPU build needs its own torch/transformers set (docs/ARCHITECTURE.md, Models), so on this kind of
machine it lives in .venv-vllm. ``VLLMWorker`` starts this module there (``_BOOT``, with CHECKPOINT); the worker
holds one ``vllm.LLM`` (``vllm_backend.VLLMBackend``, in process in the worker) and answers one JSON line per batch.
Protocol: the worker prints ``READY <dtype>`` once loaded (the served weights' dtype, e.g. bfloat16); each request
line is ``{"op": "generate", "requests": [...], "sampling": {...}}``, ``{"op": "generate_ids", "prompts": [[ids]],
"seeds": [...], "sampling": {...}}`` (GRPO's rollouts) or ``{"op": "load_weights", "path": FILE}`` (the policy's new
weights, a safetensors file), and each answer line ``{"result": ...}`` or ``{"error": "..."}``. Everything vLLM
itself prints goes to stderr, which the parent keeps in a log file for error messages.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.protocol import Generation, Request, Sampling
from flywheel.tasks.inference.vllm_backend import VLLMBackend

ROOT = Path(__file__).resolve().parents[2]  # holds flows/, tasks/, ...: the checkout, or site-packages/flywheel
# .venv-vllm has no flywheel installed: the worker maps the flywheel namespace onto ROOT itself, then runs main()
_BOOT = ("import runpy, sys, types; m = types.ModuleType('flywheel'); m.__path__ = [sys.argv.pop(1)]; "
         "sys.modules['flywheel'] = m; runpy.run_module('flywheel.tasks.inference.vllm_worker', run_name='__main__')")


WEIGHT_DTYPES = ("bfloat16", "float16", "float32")  # what a READY line may name: weight syncs are cast to it
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")
MEMORY_HINT = (" (vLLM's KV cache on CPU is FLYWHEEL_VLLM_MEMORY of the memory node's RAM for evals, default 0.3, and "
               "FLYWHEEL_VLLM_ROLLOUT_MEMORY for GRPO's rollouts, default 0.1: lower it or free memory)")


def vllm_python() -> Path:
    return Path(os.environ.get("FLYWHEEL_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))


class VLLMWorker:
    name = "vllm"

    def __init__(self, checkpoint: str, start_timeout_s: float = 900.0, memory: float | None = None,
                 dtype: str | None = None) -> None:
        python = vllm_python()
        if not python.exists():
            raise RuntimeError(f"backend 'vllm' needs vLLM: not importable here and {python} is missing; "
                               "run `bash deploy/install.sh` (or set FLYWHEEL_VLLM_PYTHON)")
        self.model_id = checkpoint
        self.log = tempfile.NamedTemporaryFile(prefix="flywheel-vllm-", suffix=".log", delete=False)
        env = {**os.environ, "VLLM_CONFIGURE_LOGGING": "1"}
        if memory is not None:  # read by VLLMBackend in the worker
            env["FLYWHEEL_VLLM_MEMORY"] = str(memory)
        if dtype is not None:
            env["FLYWHEEL_VLLM_DTYPE"] = dtype
        self.proc = subprocess.Popen([str(python), "-c", _BOOT, str(ROOT), checkpoint], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        atexit.register(self.close)
        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], start_timeout_s)[0]:  # nothing said: a stalled start
            self._refuse(f"nothing within {start_timeout_s:.0f} s")
        ready = self._line().split()
        if ready[:1] != ["READY"] or len(ready) != 2 or ready[1] not in WEIGHT_DTYPES:
            self._refuse(f"it said {' '.join(ready)[:200]!r}, not 'READY <{'|'.join(WEIGHT_DTYPES)}>'")
        self.weight_dtype = ready[1]

    def _refuse(self, why: str) -> None:
        self.proc.kill()  # a worker that stalls or answers anything else is not one to keep running
        self.proc.wait()
        raise RuntimeError(f"the vLLM worker did not start: {why}; its log: {self._tail()}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            cause = self._cause()
            hint = MEMORY_HINT if "memory" in cause.lower() else ""
            raise RuntimeError(f"the vLLM worker exited ({self.proc.returncode}): {cause or 'no error line'}{hint}; "
                               f"its log ends: {self._tail()}")
        return line.strip()

    def _tail(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-1500:]

    def _cause(self) -> str:
        """The last exception line in the worker's log (``ValueError: ...``, vLLM's ``[rank0]:`` prefix dropped)."""
        lines = (re.sub(r"^\[rank\d+\]:\s*", "", line).strip()
                 for line in Path(self.log.name).read_text(errors="replace").splitlines())
        return next((line for line in reversed(list(lines)) if EXCEPTION_LINE.match(line)), "")

    def _call(self, payload: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self._line())
        if "error" in reply:
            raise RuntimeError(f"vLLM worker: {reply['error']}")
        return reply["result"]

    def generate(self, requests: Sequence[Request], sampling: Sampling) -> list[Generation]:
        payload = {"op": "generate", "requests": [asdict(r) for r in requests], "sampling": asdict(sampling)}
        return [Generation(**g) for g in self._call(payload)]

    def generate_ids(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
                     sampling: Sampling) -> list[list[int]]:
        return self._call({"op": "generate_ids", "prompts": [list(p) for p in prompts], "seeds": list(seeds),
                           "sampling": asdict(sampling)})

    def load_weights(self, path: str) -> int:
        return self._call({"op": "load_weights", "path": path})

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        Path(self.log.name).unlink(missing_ok=True)


def main() -> None:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # vLLM's own prints must not mix with the protocol
    backend = VLLMBackend(sys.argv[1])
    out.write(f"READY {backend.weight_dtype}\n")
    for line in sys.stdin:
        try:
            job = json.loads(line)
            if job["op"] == "generate":
                gens = backend.generate([Request(**r) for r in job["requests"]], Sampling(**job["sampling"]))
                result: Any = [g.as_dict() for g in gens]
            elif job["op"] == "generate_ids":
                result = backend.generate_ids(job["prompts"], job["seeds"], Sampling(**job["sampling"]))
            elif job["op"] == "load_weights":
                result = backend.load_weights(job["path"])
            else:
                raise ValueError(f"unknown op {job['op']!r}")
            out.write(json.dumps({"result": result}) + "\n")
        except Exception as err:  # reported to the parent, which raises it with this message
            out.write(json.dumps({"error": f"{type(err).__name__}: {err}"}) + "\n")


if __name__ == "__main__":
    main()
