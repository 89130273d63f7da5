"""Does a smooth validation score rank GRPO checkpoints as the 1,000 held-out tasks do? (bench/results/learning.md)
python bench/scripts/validation_margins.py RUN OUT NAME=ADAPTER[:EVAL]...:
RUN is a `flywheel run --profile full` folder (its grpo/train_config.json
names the validation slice); the first adapter is the reference (e.g. RUN/sft/adapter). Per adapter: the margin
score on the validation slice (margins.py, the value selection ranks success ties by; `score`) and the same with
the margins rescaled to the first adapter's median |margin| (`rescaled`: a uniform sharpening does not count; tried,
not adopted: bench/results/learning.md), each with its paired difference from the first and its
standard error, and with an EVAL folder (`flywheel eval` of that adapter on the held-out tasks
of RUN/sft/eval) the gate's paired held-out delta against RUN/sft/eval. Writes OUT/result.json and
OUT/margins.parquet; an adapter whose name OUT/margins.parquet already holds is not run again (margins are
deterministic), so a rerun with more names costs only the new ones."""
import json
import math
import statistics
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
done = pl.read_parquet(out / "margins.parquet") if (out / "margins.parquet").is_file() else None
old = out / "result.json"  # the reused margins' timings
before = {r["name"]: r for r in json.loads(old.read_text())["rows"]} if done is not None and old.is_file() else {}


def score_delta(first: list[float], margins: list[float], k: float) -> tuple[float, float]:
    """The paired mean difference of the sigmoids (margins times k against the first's) and its standard error."""
    diff = [1 / (1 + math.exp(-k * b)) - 1 / (1 + math.exp(-a)) for a, b in zip(first, margins, strict=True)]
    mean = sum(diff) / len(diff)
    return mean, ((sum((d - mean) ** 2 for d in diff) / (len(diff) - 1) / len(diff)) ** 0.5 if len(diff) > 1 else 0.0)


for arg in sys.argv[3:]:
    name, spec = arg.split("=", 1)
    adapter, _, evals = spec.partition(":")
    row = {"name": name, "adapter": adapter}
    if done is not None and name in done["name"].to_list():
        margins = done.filter(pl.col("name") == name)["margin"].to_list()
        row |= {k: v for k, v in before.get(name, {}).items() if k == "margin_s"}
    else:
        model, tokenizer = load_causal_lm(Path(adapter))
        t0 = time.perf_counter()
        margins = reference_margins(model, tokenizer, tasks)
        row["margin_s"] = round(time.perf_counter() - t0, 1)
    frames.append(pl.DataFrame({"name": name, "id": [t.id for t in tasks], "margin": margins}))
    first = frames[0]["margin"].to_list()
    scale = statistics.median(abs(m) for m in margins)
    k = statistics.median(abs(m) for m in first) / scale
    plain, plain_se = score_delta(first, margins, 1.0)
    rescaled, rescaled_se = score_delta(first, margins, k)
    row |= {"score": round(margin_score(margins), 5), "rescaled": round(margin_score([k * m for m in margins]), 5),
            "median_abs": round(scale, 3), "exact": sum(m > 0 for m in margins),
            "score_delta": round(plain, 4), "score_se": round(plain_se, 4),
            "rescaled_delta": round(rescaled, 4), "rescaled_se": round(rescaled_se, 4)}
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
