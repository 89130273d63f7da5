"""Does a smooth validation score rank GRPO checkpoints as the 1,000 held-out tasks do? (bench/RESULTS.md, issue 17)
python run.py RUN OUT NAME=ADAPTER[:EVAL]...: RUN is a `flywheel run --profile full` folder (its grpo/train_config.json
names the validation slice); the first adapter is the reference (e.g. RUN/sft/adapter). Per adapter: the margin
score on the validation slice (margins.py, the value selection ranks success ties by), its paired difference from
the first with its standard error, and with an EVAL folder (`flywheel eval` of that adapter on the held-out tasks of
RUN/sft/eval) the gate's paired held-out delta against RUN/sft/eval. Writes OUT/result.json and OUT/margins.parquet."""
import json
import math
import sys
import time
from pathlib import Path

import polars as pl

from flywheel.flows.promote import load_evals
from flywheel.tasks.inference.models import load_causal_lm
from flywheel.tasks.release.gate import GateConfig, paired, success_delta
from flywheel.tasks.training.margins import margin_score, reference_margins
from flywheel.tasks.training.train import TrainConfig, load_tasks

run, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
config = TrainConfig(**json.loads((run / "grpo" / "train_config.json").read_text(encoding="utf-8")))
tasks = load_tasks(config, "validation")
frames, results = [], []
for arg in sys.argv[3:]:
    name, spec = arg.split("=", 1)
    adapter, _, evals = spec.partition(":")
    model, tokenizer = load_causal_lm(Path(adapter))
    t0 = time.perf_counter()
    margins = reference_margins(model, tokenizer, tasks)
    row = {"name": name, "adapter": adapter, "margin_s": round(time.perf_counter() - t0, 1),
           "score": round(margin_score(margins), 5), "exact": sum(m > 0 for m in margins)}
    frames.append(pl.DataFrame({"name": name, "id": [t.id for t in tasks], "margin": margins}))
    first = frames[0]["margin"].to_list()
    diff = [1 / (1 + math.exp(-b)) - 1 / (1 + math.exp(-a)) for a, b in zip(first, margins, strict=True)]
    mean = sum(diff) / len(diff)
    se = (sum((d - mean) ** 2 for d in diff) / (len(diff) - 1) / len(diff)) ** 0.5 if len(frames) > 1 else 0.0
    row |= {"score_delta": round(mean, 4), "score_se": round(se, 4)}
    if evals:
        _, a, _, b = load_evals(str(run / "sft" / "eval"), evals)
        p = paired(a, b)
        d = success_delta(p, GateConfig(seed=0))
        row |= {"heldout_delta": round(d.delta, 4), "heldout_ci": [round(d.ci_low, 4), round(d.ci_high, 4)],
                "fixed": p.filter(~pl.col("success") & pl.col("success_cand")).height,
                "broken": p.filter(pl.col("success") & ~pl.col("success_cand")).height}
    results.append(row)
    print(json.dumps(row), flush=True)
pl.concat(frames).write_parquet(out / "margins.parquet")
(out / "result.json").write_text(json.dumps({"run": str(run), "validation_tasks": len(tasks), "rows": results},
                                            indent=1) + "\n", encoding="utf-8")
