"""Local models: the embedded SmolLM2-135M-Instruct (embedded.py) and local checkpoints or PEFT adapters, checked
before a load (model_checks.py), loaded, fingerprinted and exported. Nothing is fetched from a hub.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from flywheel.tasks.files import share_tree
from flywheel.tasks.inference.embedded import EMBEDDED, GGUF_NAME, cache_root, embedded_checkpoint, embedded_gguf
from flywheel.tasks.inference.model_checks import adapter_base, check_model

__all__ = ["EMBEDDED", "GGUF_NAME", "UNREAD", "adapter_base", "cache_root", "check_model", "embedded_checkpoint",
           "embedded_gguf", "export_version", "fingerprint", "fingerprints", "is_adapter", "load_causal_lm",
           "resolve_model"]


def resolve_model(ref: str | None) -> Path:
    """``None``/"embedded" -> the embedded checkpoint; else a local checkpoint or PEFT adapter folder (whose files
    ``check_model`` checks before a load)."""
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


def load_causal_lm(path: Path) -> tuple[Any, Any]:
    """(model, tokenizer) for a checkpoint folder, or for base + PEFT adapter when ``path`` is an adapter; checked
    first (``check_model``) and loaded from local files only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model(str(path))
    if not is_adapter(path):  # absolute: an adapter trained on it records where its base is, wherever it runs
        return (AutoModelForCausalLM.from_pretrained(path.absolute(), local_files_only=True),
                AutoTokenizer.from_pretrained(path, padding_side="left", local_files_only=True))
    from peft import LoraConfig, PeftModel

    base = adapter_base(path)
    config = LoraConfig.from_pretrained(str(path), local_files_only=True)
    config.base_model_name_or_path = str(base)  # absolute: an adapter trained on from here records its real base
    tok_dir = path if (path / "tokenizer_config.json").is_file() else base
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, local_files_only=True), str(path),
                                      config=config, local_files_only=True)
    return model, AutoTokenizer.from_pretrained(tok_dir, padding_side="left", local_files_only=True)


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
