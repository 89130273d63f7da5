"""Hostile model folders given to --model (serve, eval, train): each is refused by
``tasks/inference/models.py: check_model`` in one line naming the file, before anything loads; nothing ever
reaches a hub. Before, they hung (a FIFO for weights), printed tracebacks (a JSON list, an unknown peft_type, a
truncated safetensors file), allocated gigabytes (r=4000 by a duplicate key) or asked huggingface.co for a base
named by a chain of adapters (27 s of retries)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file
from typer.testing import CliRunner

from flywheel.flows.cli import app
from flywheel.tasks.inference.models import adapter_base, check_model

ROOT = Path(__file__).resolve().parents[3]
CONFIG = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8,
          "target_modules": ["q_proj", "v_proj"]}
LAYER = "base_model.model.model.layers.0.self_attn.q_proj"
TINY = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 64}


def _checkpoint(folder: Path) -> Path:
    """A full model folder as check_model sees it (config.json and weights); nothing here loads it."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TINY))  # tiny: the old code loaded it (llama's defaults: 7B)
    save_file({"w": np.zeros(2, np.float32)}, str(folder / "model.safetensors"))
    return folder


def _adapter(folder: Path, base: Any, rank: int = 4, **config: Any) -> Path:
    """A LoRA adapter folder of one layer (rank ``rank``) on ``base``."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps(CONFIG | {"base_model_name_or_path": base} | config))
    save_file({f"{LAYER}.lora_A.weight": np.zeros((rank, 8), np.float32),
               f"{LAYER}.lora_B.weight": np.zeros((8, rank), np.float32)}, str(folder / "adapter_model.safetensors"))
    return folder


def _bytes(name: str, data: bytes):
    return lambda folder: (folder / name).write_bytes(data)


def _truncate(folder: Path) -> None:
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])


def _replace(name: str, make):
    def edit(folder: Path) -> None:
        (folder / name).unlink()
        make(folder / name)
    return edit


def _config(**fields: Any):
    def edit(folder: Path) -> None:
        path = folder / "adapter_config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | fields))
    return edit


CASES = {  # name: (edit of a good adapter folder, the file the error names, a fragment of the error)
    "fifo weights": (_replace("adapter_model.safetensors", os.mkfifo), "adapter_model.safetensors",
                     "not a regular file"),
    "weights -> /dev/zero": (_replace("adapter_model.safetensors", lambda p: p.symlink_to("/dev/zero")),
                             "adapter_model.safetensors", "not a regular file"),
    "fifo config": (_replace("adapter_config.json", os.mkfifo), "adapter_config.json", "not a regular file"),
    "list config": (_bytes("adapter_config.json", b"[1, 2, 3]"), "adapter_config.json", "JSON list, not an object"),
    "not JSON": (_bytes("adapter_config.json", b"{not json"), "adapter_config.json", "not JSON"),
    "duplicate r": (_bytes("adapter_config.json", json.dumps(CONFIG).encode()[:-1] + b', "r": 4000}'),
                    "adapter_config.json", 'duplicate key "r"'),
    "50 MB config": (_bytes("adapter_config.json", b"{" + b" " * (50 << 20) + b"}"), "adapter_config.json",
                     "over the 1048576 bytes"),
    "peft_type NOPE": (_config(peft_type="NOPE"), "adapter_config.json", "peft_type 'NOPE' is not 'LORA'"),
    "huge r": (_config(r=4000), "adapter_config.json", "r 4000 is not a whole number"),
    "r as text": (_config(r="4"), "adapter_config.json", "r '4' is not a whole number"),
    "alpha inf": (_config(lora_alpha=1e300), "adapter_config.json", "lora_alpha"),
    "regex targets": (_config(target_modules="(a+)+$"), "adapter_config.json", "target_modules is not 'all-linear'"),
    "regex excluded": (_config(exclude_modules="(a|aa)*c"), "adapter_config.json", "exclude_modules is not null"),
    "r mismatch": (_config(r=64), "adapter_model.safetensors", "has rank 4, but adapter_config.json says r=64"),
    "no weights": (lambda f: (f / "adapter_model.safetensors").unlink(), "adapter_model.safetensors", "missing"),
    "truncated weights": (_truncate, "adapter_model.safetensors", "not a whole safetensors file"),
    "huge header": (_bytes("adapter_model.safetensors", (1 << 62).to_bytes(8, "little") + b"{}"),
                    "adapter_model.safetensors", "not a whole safetensors file"),
    "header list": (_bytes("adapter_model.safetensors", (2).to_bytes(8, "little") + b"[]"),
                    "adapter_model.safetensors", "a JSON list, not an object"),
    "hub base": (_config(base_model_name_or_path="openai-community/gpt2"), "adapter_config.json",
                 "nothing is fetched from a hub"),
    "base /etc": (_config(base_model_name_or_path="/etc"), "adapter_config.json", "is not a local model folder"),
}


@pytest.mark.parametrize("case", CASES)
def test_check_model_refuses_crafted_adapters_in_one_line_naming_the_file(tmp_path, case) -> None:
    edit, name, fragment = CASES[case]
    folder = _adapter(tmp_path / "a", str(_checkpoint(tmp_path / "base")))
    check_model(str(folder))  # the good folder passes
    edit(folder)
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as caught:
        check_model(str(folder))
    message = str(caught.value)
    assert time.perf_counter() - t0 < 2 and "\n" not in message, message
    assert str(folder / name) in message and fragment in message, message


def _sharded(shards: dict[str, str]):
    """A checkpoint made sharded: its weights moved to ``shard.safetensors`` and an index naming ``shards``."""
    def edit(folder: Path) -> None:
        (folder / "model.safetensors").rename(folder / "shard.safetensors")
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    return edit


def _tiny(**fields: Any):
    return lambda folder: (folder / "config.json").write_text(json.dumps(TINY | fields))


CHECKPOINT_CASES = {  # name: (edit of a good checkpoint folder, the file the error names, a fragment of the error)
    "shard in a subfolder": (_sharded({"w": "sub/x.safetensors"}), "model.safetensors.index.json",
                             "not a mapping of tensor names to file names in this folder"),
    "shard outside": (_sharded({"w": ".."}), "model.safetensors.index.json", "file names in this folder"),
    "missing shard": (_sharded({"w": "gone.safetensors"}), "gone.safetensors", "is missing"),
    "truncated shard": (lambda f: (_sharded({"w": "shard.safetensors"})(f), _bytes("shard.safetensors", b"\1")(f)),
                        "shard.safetensors", "not a whole safetensors file"),
    "fifo shard": (lambda f: (_sharded({"w": "shard.safetensors"})(f), (f / "shard.safetensors").unlink(),
                              os.mkfifo(f / "shard.safetensors")), "shard.safetensors", "not a regular file"),
    "huge dimensions": (_tiny(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80), "config.json",
                        "declares a model of"),
    "a million layers": (_tiny(num_hidden_layers=10**6), "config.json", "num_hidden_layers 1000000 is over 1024"),
    # other names and nested configs too (review probe: mpt's n_layers, gemma3's text_config: 50,000 layers took
    # 37-56 s and 2-3 GB on the meta device before the refusal)
    "mpt layers": (_tiny(model_type="mpt", n_layers=50_000), "config.json", "n_layers 50000 is over 1024"),
    "nested layers": (_tiny(text_config={"num_hidden_layers": 50_000}), "config.json",
                      "num_hidden_layers 50000 is over 1024"),
    "experts": (_tiny(num_local_experts=10**6), "config.json", "num_local_experts 1000000 is over 4096"),
    "unknown model_type": (_tiny(model_type="nope"), "config.json", "transformers cannot build a causal LM"),
    "pickle for 7B": (lambda f: ((f / "model.safetensors").unlink(), _bytes("pytorch_model.bin", b"x" * 64)(f),
                                 _tiny(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32)(f)),
                      "config.json", "bytes: a load would allocate the rest"),
}


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_check_model_refuses_crafted_checkpoints_before_a_load_allocates_or_hangs(tmp_path, case) -> None:
    """A checkpoint (as --model, or as an adapter's base) whose index names files elsewhere, a FIFO or a truncated
    shard (transformers and vLLM read every shard), or whose config.json declares far more than its weights hold (a
    load allocates the whole declared model: 7B parameters from a 64-byte file) is refused in one line naming the
    file; the layer count is bounded before the config is built."""
    edit, name, fragment = CHECKPOINT_CASES[case]
    base = _checkpoint(tmp_path / "base")
    adapter = _adapter(tmp_path / "a", str(base))
    check_model(str(base))
    edit(base)
    for ref in (base, adapter):
        t0 = time.perf_counter()
        with pytest.raises(ValueError) as caught:
            check_model(str(ref))
        message = str(caught.value)
        assert time.perf_counter() - t0 < 5 and "\n" not in message, message
        assert str(base / name) in message and fragment in message, message


def test_peft_forms_flywheel_does_not_write_still_load_when_they_are_safe(tmp_path) -> None:
    """A plain module name or 'all-linear' as target_modules, a name as exclude_modules, unsigned and 8-bit float
    tensors: PEFT writes them, so they pass; a regular expression does not (see CASES)."""
    base = _checkpoint(tmp_path / "base")
    for i, fields in enumerate(({"target_modules": "all-linear"}, {"target_modules": "q_proj"},
                                {"exclude_modules": "lm_head"})):
        check_model(str(_adapter(tmp_path / f"a{i}", str(base), **fields)))
    save_file({"u": np.zeros(3, np.uint16), "v": np.zeros(2, np.uint64)}, str(base / "extra.safetensors"))
    check_model(str(base))


def test_an_adapter_base_must_be_a_full_local_model_folder(tmp_path) -> None:
    """A base that is another adapter (whose own base is on a hub), the adapter itself, a checkpoint without weights
    or one that is also an adapter: refused, naming the adapter's config."""
    hub = _adapter(tmp_path / "hub", "openai-community/gpt2")
    chain = _adapter(tmp_path / "chain", str(hub))
    selfbase = _adapter(tmp_path / "self", str(tmp_path / "self"))
    (empty := tmp_path / "noweights").mkdir()
    (empty / "config.json").write_text("{}")
    both = _checkpoint(tmp_path / "both")
    (both / "adapter_config.json").write_text(json.dumps(CONFIG | {"base_model_name_or_path": "gpt2"}))
    for folder, fragment in ((chain, "is another adapter"), (selfbase, "is another adapter")):
        with pytest.raises(ValueError, match=fragment) as caught:
            check_model(str(folder))
        assert str(folder / "adapter_config.json") in str(caught.value)
    for base, fragment in ((empty, "no weights"), (both, "both config.json and adapter_config.json")):
        with pytest.raises(ValueError, match=fragment):
            check_model(str(_adapter(tmp_path / f"on-{base.name}", str(base))))
        with pytest.raises(ValueError, match=fragment):
            check_model(str(base))  # as --model itself too


def test_a_relative_base_is_resolved_against_the_adapter_folder_not_the_working_directory(tmp_path,
                                                                                           monkeypatch) -> None:
    base = _checkpoint(tmp_path / "models" / "base")
    adapter = _adapter(tmp_path / "models" / "adapters" / "a", "../../base")
    (elsewhere := tmp_path / "elsewhere").mkdir()
    _adapter(elsewhere / "base", None)  # what the working directory would have offered: another adapter
    monkeypatch.chdir(elsewhere)
    check_model(str(adapter))
    assert adapter_base(adapter).resolve() == base.resolve()
    with pytest.raises(ValueError, match="relative to the adapter folder"):
        check_model(str(_adapter(tmp_path / "models" / "b", "base")))  # models/b/base does not exist


@pytest.mark.integration
def test_a_real_adapter_loads_with_its_relative_base_and_records_it_absolute(tmp_path, monkeypatch) -> None:
    """The embedded model's adapters keep working: one whose base is written relative to it loads from any working
    directory, and a model loaded from it records its base as an absolute path (what a further training saves)."""
    from conftest import lora_adapter
    from flywheel.tasks.inference.models import embedded_checkpoint, load_causal_lm

    (tmp_path / "base").symlink_to(embedded_checkpoint())
    adapter = lora_adapter(tmp_path / "adapters" / "a", seed=1)
    path = adapter / "adapter_config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"base_model_name_or_path": "../../base"}))
    monkeypatch.chdir(tmp_path / "adapters")
    model, tokenizer = load_causal_lm(adapter)
    recorded = Path(model.peft_config["default"].base_model_name_or_path)
    assert recorded.is_absolute() and recorded.resolve() == embedded_checkpoint().resolve()
    assert tokenizer("hi")["input_ids"]


def _one_error(result) -> str:
    text = result.output
    assert "Traceback" not in text and (result.exception is None or isinstance(result.exception, SystemExit)), (
        repr(result.exception), text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


@pytest.mark.parametrize("case", ["list config", "peft_type NOPE", "truncated weights", "no weights", "hub base"])
def test_serve_and_eval_refuse_a_crafted_adapter_in_one_line_before_loading(tmp_path, case) -> None:
    edit, name, fragment = CASES[case]
    folder = _adapter(tmp_path / "a", str(_checkpoint(tmp_path / "base")))
    edit(folder)
    (dataset := tmp_path / "ds").mkdir()
    (dataset / "manifest.json").write_text("{}")  # the model is checked before the flow reads the dataset
    runner = CliRunner()
    for args in (["serve", "--model", str(folder)],
                 ["eval", "--dataset", str(dataset), "--out", str(tmp_path / "out"), "--model", str(folder)]):
        t0 = time.perf_counter()
        line = _one_error(runner.invoke(app, args, prog_name="flywheel"))
        assert str(folder / name) in line and fragment in line, line
        assert time.perf_counter() - t0 < 5, args  # before any model load or Prefect API start
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_serve_never_asks_a_hub_and_never_hangs(tmp_path) -> None:
    """The real entry point: an adapter chained to an adapter on a hub base, and a FIFO for weights. The old code
    retried huggingface.co for 27 s, and blocked on the FIFO for ever (the timeout)."""
    base = _checkpoint(tmp_path / "base")
    chain = _adapter(tmp_path / "chain", str(_adapter(tmp_path / "hub", "openai-community/gpt2")))
    fifo = _adapter(tmp_path / "fifo", str(base))
    _replace("adapter_model.safetensors", os.mkfifo)(fifo)
    for folder, fragment in ((chain, "is another adapter"), (fifo, "not a regular file")):
        done = subprocess.run([sys.executable, "-m", "flywheel.flows.cli", "serve", "--model", str(folder)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        assert done.returncode == 1 and len(lines) == 1 and fragment in lines[0], lines
        assert "huggingface.co" not in done.stderr


@pytest.mark.integration
def test_the_command_line_is_offline() -> None:
    """Whatever the environment says, a flywheel process never reaches a hub (huggingface_hub reads it on import)."""
    code = "import flywheel.flows.cli, huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE, c.is_offline_mode())"
    env = os.environ | {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.stdout.split() == ["True", "True"], done.stdout + done.stderr


def test_a_4_bit_checkpoint_is_counted_by_its_packed_weights(tmp_path) -> None:
    """GPTQ/AWQ pack 8 parameters into one int32: a quantized checkpoint's weights hold far fewer elements than its
    config declares. With a quantization_config it passes; the same folder without one is another model's config
    (review probe: such checkpoints were refused as "different models")."""
    folder = tmp_path / "gptq"
    folder.mkdir()
    config = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000}  # ~11.5M parameters
    elements = 11_600_000 // 8
    header = json.dumps({"qweight": {"dtype": "I32", "shape": [elements], "data_offsets": [0, 4 * elements]}}).encode()
    with (folder / "model.safetensors").open("wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header)
        fh.truncate(8 + len(header) + 4 * elements)  # sparse: only the header is read
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="declares a model of .* but its weights hold 1,450,000 elements"):
        check_model(str(folder))
    quantized = config | {"quantization_config": {"bits": 4, "quant_method": "gptq"}}
    (folder / "config.json").write_text(json.dumps(quantized))
    check_model(str(folder))
