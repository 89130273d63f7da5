"""Average LoRA adapters trained from one start (the same base and config): `python soup.py OUT ADAPTER...` writes
OUT/adapter_model.safetensors, each tensor the mean of the adapters' (A and B averaged apart: to first order in
GRPO's small moves from the shared start, the mean of their deltas), with the first adapter's config. The question
(issue 17, bench/RESULTS.md "Averaging GRPO adapters"): does averaging three seeds' runs, or one run's checkpoints,
keep GRPO's gain while removing the draw-to-draw spread?"""
import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

out, adapters = Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]]
out.mkdir(parents=True, exist_ok=True)
for name in ("adapter_config.json", "README.md"):
    shutil.copyfile(adapters[0] / name, out / name)
tensors = [load_file(a / "adapter_model.safetensors") for a in adapters]
if any(t.keys() != tensors[0].keys() for t in tensors):
    sys.exit("the adapters hold different tensors: not one config")
mean = {k: (sum(t[k].float() for t in tensors) / len(tensors)).to(tensors[0][k].dtype) for k in tensors[0]}
save_file({k: v.contiguous() for k, v in mean.items()}, out / "adapter_model.safetensors")
print(f"{out}: the mean of {len(adapters)} adapters, {len(mean)} tensors")
