"""``check_model``: a --model folder (a checkpoint, or a LoRA adapter and its base) checked before anything loads
it, each problem one ValueError naming the file and what to fix (docs/ARCHITECTURE.md, "Typed config").
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from flywheel.tasks.inference.embedded import EMBEDDED, embedded_checkpoint
from flywheel.tasks.inference.model_files import (
    json_object,
    number_in,
    open_regular,
    safetensors_header,
)

MAX_RANK = 1024
NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")  # a module name: never a regex PEFT would run
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
MAX_LAYERS = 1024  # the deepest published models have ~130; checked before a config is built on the meta device
MAX_EXPERTS = 4096  # mixture-of-experts models publish up to a few hundred
MAX_INFLATION = 4  # parameters a config may declare per weight element stored: more is another model's config
FIX = "copy the whole folder save_pretrained wrote"
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
    config = json_object(path / "config.json")
    if not any((path / name).is_file() for name in WEIGHTS):
        raise ValueError(f"{path} has config.json but no weights ({' or '.join(WEIGHTS[:2])}): {FIX}")
    stored, per = _stored_weights(path)
    unit = "elements" if per == 1 else "bytes"
    per *= 8 if config.get("quantization_config") else 1  # GPTQ/AWQ pack up to 8 parameters in one int32
    declared = _declared_params(path, config)
    if declared > MAX_INFLATION * stored * per + (1 << 20):
        raise ValueError(f"{path / 'config.json'} declares a model of {declared:,} parameters but its weights hold "
                         f"{stored:,} {unit}: a load would allocate the rest; the config and the weights come from "
                         f"different models: {FIX}")


def _shards(index: Path) -> set[str]:
    """The files a sharded checkpoint's index names: file names in its folder (never a path elsewhere)."""
    weight_map = json_object(index).get("weight_map")
    if not (isinstance(weight_map, dict) and weight_map and all(
            isinstance(v, str) and NAME.fullmatch(v) and v not in (".", "..") for v in weight_map.values())):
        raise ValueError(f"{index}: weight_map is not a mapping of tensor names to file names in this folder: {FIX}")
    return set(weight_map.values())


def _stored_weights(path: Path) -> tuple[int, int]:
    """(amount, parameters per unit) of a checkpoint's weights, every file a loader may read checked first: each
    safetensors file (vLLM reads them all) and each shard an index names, by its header (amount: tensor elements);
    pytorch_model.bin weights, a pickle not read here, as regular files only (amount: bytes, 2 parameters per byte
    at 4 bits)."""
    safe = {p.name for p in path.glob("*.safetensors")}
    pickles = {n for n in ("pytorch_model.bin",) if (path / n).exists()}
    if (path / "model.safetensors.index.json").exists():
        safe |= _shards(path / "model.safetensors.index.json")
    if (path / "pytorch_model.bin.index.json").exists():
        pickles |= _shards(path / "pytorch_model.bin.index.json")
    elements = {}
    for name in sorted(safe):
        for tensor, (_, shape) in safetensors_header(path / name, FIX).items():
            elements[tensor] = math.prod(shape)
    sizes = 0
    for name in sorted(pickles):
        fh, size = open_regular(path / name)
        fh.close()
        sizes += size
    return (sum(elements.values()), 1) if safe else (sizes, 2)


def _declared_params(path: Path, config: dict[str, Any]) -> int:
    """The parameters a checkpoint's config.json declares, counted on a model built on the meta device (no memory);
    every count of layers or experts, nested configs' too (``text_config``), is bounded first: building a million
    layers takes minutes and gigabytes even there."""
    stack = [config]
    while stack:
        for key, value in stack.pop().items():
            if isinstance(value, dict):
                stack.append(value)
            bound = MAX_LAYERS if "layer" in key.lower() else MAX_EXPERTS if "expert" in key.lower() else None
            if bound and isinstance(value, int) and not number_in(value, 0, bound, whole=True):
                raise ValueError(f"{path / 'config.json'}: {key} {value!r} is over {bound}: {FIX}")
    try:
        return _meta_params(json.dumps(config, sort_keys=True))
    except ValueError as exc:
        raise ValueError(f"{path / 'config.json'}: {exc}") from None


@functools.lru_cache(maxsize=32)
def _meta_params(config_json: str) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = json.loads(config_json)
    try:
        built = AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(built)
    except Exception as exc:  # noqa: BLE001 - any failure to build the config is the file's: one line naming it
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ValueError(f"transformers cannot build a causal LM of model_type {str(config.get('model_type'))[:40]!r} "
                         f"from it ({first}): {FIX}") from None
    return sum(p.numel() for p in model.parameters())


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


def _names(value: Any, one: bool) -> bool:
    """A list of at most 1000 module names, or (``one``) a single name or 'all-linear': PEFT matches a string as a
    regular expression, so only a plain name (linear to match: no quantifier, no group) is let through."""
    if one and isinstance(value, str):
        return value == "all-linear" or bool(NAME.fullmatch(value))
    return isinstance(value, list) and len(value) <= 1000 and all(isinstance(t, str) and NAME.fullmatch(t)
                                                                   for t in value)


def _adapter_config(path: Path) -> dict[str, Any]:
    """adapter_config.json, checked: the LoRA adapters Flywheel trains, of bounded sizes, module names only."""
    file = path / "adapter_config.json"
    config = json_object(file)
    problems = []
    if config.get("peft_type") != "LORA":
        problems.append(f"peft_type {config.get('peft_type')!r} is not 'LORA' (the only adapter type loaded)")
    if config.get("task_type") not in (None, "CAUSAL_LM"):
        problems.append(f"task_type {config.get('task_type')!r} is not 'CAUSAL_LM'")
    if not number_in(config.get("r"), 1, MAX_RANK, whole=True):
        problems.append(f"r {config.get('r')!r} is not a whole number from 1 to {MAX_RANK}")
    if not number_in(config.get("lora_alpha", 8), 1e-6, 1e6):
        problems.append(f"lora_alpha {config.get('lora_alpha')!r} is not a number from 1e-6 to 1e6")
    if not _names(config.get("target_modules"), one=True) or not config["target_modules"]:
        problems.append("target_modules is not 'all-linear', a module name or a list of them (letters, digits, '_', "
                        "'.', '-': PEFT runs a string as a regular expression, and only a plain name is loaded)")
    for key, one in (("exclude_modules", True), ("modules_to_save", False)):
        if not _names(config.get(key) or [], one):
            problems.append(f"{key} is not null{', a module name' if one else ''} or a list of module names")
    for key, whole, high in (("rank_pattern", True, MAX_RANK), ("alpha_pattern", False, 1e6)):
        pattern = config.get(key) or {}
        if not (isinstance(pattern, dict) and len(pattern) <= 10_000 and all(
                NAME.fullmatch(k) and number_in(v, 1 if whole else 1e-6, high, whole) for k, v in pattern.items())):
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
    """adapter_model.safetensors: a whole safetensors file (``safetensors_header``) whose LoRA tensors have the
    config's rank(s)."""
    fix = "copy it again from the training output"
    if not path.exists() and not os.path.islink(path):
        raise ValueError(f"{path} is missing (the adapter's LoRA weights): copy it from the training output; only "
                         "safetensors adapters are loaded")
    ranks, lora = {config["r"], *(config.get("rank_pattern") or {}).values()}, 0
    for name, (_, shape) in safetensors_header(path, fix).items():
        kind = LORA_TENSOR.search(name)
        if kind:
            lora += 1
            rank = (shape + [None, None])[0 if kind.group(1) == "A" else 1]
            if rank not in ranks:
                raise ValueError(f"{path}: tensor {name} has rank {rank}, but adapter_config.json says r="
                                 f"{config['r']}: the two files come from different adapters; copy both from one "
                                 "save")
    if not lora:
        raise ValueError(f"{path} holds no LoRA tensors (lora_A/lora_B): {fix}")


def _base_path(path: Path, config: dict[str, Any]) -> Path:
    """The adapter's base folder: its ``base_model_name_or_path``, absolute or relative to the adapter folder (not
    to the working directory: the adapter and its base move together); null: the embedded model."""
    base = config.get("base_model_name_or_path")
    return embedded_checkpoint() if not base else (path / Path(base).expanduser()).absolute()


def adapter_base(path: Path) -> Path:
    """The base checkpoint a PEFT adapter was trained on (its ``base_model_name_or_path``, resolved locally: absolute,
    or relative to the adapter folder); ``check_model`` checks that it is a full model folder."""
    base = json_object(path / "adapter_config.json").get("base_model_name_or_path")
    if not (base is None or isinstance(base, str)):
        raise ValueError(f"{path / 'adapter_config.json'}: base_model_name_or_path is not null or a folder path")
    return _base_path(path, {"base_model_name_or_path": base})
