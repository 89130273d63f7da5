"""Bounded, strict readers for the files of a model folder: a regular file opened without blocking, a config
file as one strict JSON object, a safetensors header; each failure is one ValueError naming the file.

Standard library only: the vLLM environment loads models too and has no orjson (so not
``schemas.records.strict_json``).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 1 << 20  # adapter_config.json, config.json: a few KB when saved by save_pretrained
MAX_HEADER_BYTES = 16 << 20  # a safetensors header (JSON): ~130 bytes per tensor
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
               "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}  # whole-byte dtypes


def open_regular(path: Path) -> tuple[Any, int]:
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


def strict_json(data: bytes) -> Any:
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


def parse_object(path: Path, data: bytes, what: str, fix: str) -> dict[str, Any]:
    """``data`` read from ``path`` as one strict JSON object, or one ValueError naming the file, ``what`` it held and
    ``fix``."""
    try:
        value = strict_json(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {what}{exc}; {fix}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {what}a JSON {type(value).__name__}, not an object; {fix}")
    return value


def json_object(path: Path) -> dict[str, Any]:
    """A config file: a regular file of at most MAX_CONFIG_BYTES holding one strict JSON object."""
    fh, size = open_regular(path)
    with fh:
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"{path} is {size} bytes, over the {MAX_CONFIG_BYTES} bytes a config file may have: "
                             "use the file save_pretrained wrote")
        data = fh.read(MAX_CONFIG_BYTES + 1)
    return parse_object(path, data, "", "use the file save_pretrained wrote")


def number_in(value: Any, low: float, high: float, whole: bool = False) -> bool:
    kinds = (int,) if whole else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool) and low <= value <= high


def safetensors_header(path: Path, fix: str) -> dict[str, tuple[str, list[int]]]:
    """{tensor: (dtype, shape)} of a safetensors file: a regular file whose header (8-byte length + JSON, bounded,
    read alone) lists tensors of whole-byte dtypes that fit in the file; else one ValueError ending in ``fix``."""
    fh, size = open_regular(path)
    with fh:
        head = fh.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
            raise ValueError(f"{path} is not a whole safetensors file (its header length {length} does not fit "
                             f"in {size} bytes or passes {MAX_HEADER_BYTES}): {fix}")
        header = parse_object(path, fh.read(length), "its safetensors header is ", fix)
    room, tensors = size - 8 - length, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape, offsets = (info.get("shape"), info.get("data_offsets")) if isinstance(info, dict) else (None, None)
        if not (isinstance(shape, list) and len(shape) <= 8 and all(number_in(d, 0, 1 << 40, True) for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2
                and all(number_in(o, 0, room, True) for o in offsets)
                and info.get("dtype") in DTYPE_BYTES
                and offsets[1] - offsets[0] == math.prod(shape) * DTYPE_BYTES[info["dtype"]]):
            raise ValueError(f"{path}: tensor {name[:200]!r} has no valid dtype, shape and place in the file "
                             f"(truncated or not safetensors): {fix}")
        tensors[name] = (info["dtype"], shape)
    return tensors
