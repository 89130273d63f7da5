"""GRPO updates with the shared prompt prefix run once (tasks/training/shared_prefix.py) against TRL's padded pass
(`--no-prefix-cache`), the full profile's GRPO stage otherwise (bench/results/throughput.md):
python bench/scripts/grpo_update_shared_prefix.py RUN_DIR STEPS OUT_JSON
RUN_DIR: a `flywheel run --profile full` output (its dataset, SFT adapter and curriculum); transformers rollouts, no
checks. Both trainings start from the same adapter with the same seed; rollouts under the same seeds give the same
completions either way (issue 15), so each step's update sees the same rows."""
import json
import sys
import time
from pathlib import Path

from flywheel.tasks.training.train import TrainConfig, train

run, steps, out_json = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
dataset = next((run / "datasets" / "tool_call").glob("v-*"))
result = {}
for shared in (True, False):
    out = Path(f"/tmp/grpo_update_bench_{int(shared)}")
    config = TrainConfig(dataset=str(dataset), out=str(out), method="grpo", model=str(run / "sft" / "adapter"),
                         skip_tasks=str(run / "curriculum" / "failures_and_mixed.parquet"), train_on="failures",
                         validation_tasks=128, train_limit=867, steps=steps, batch_size=16, micro_batch=8,
                         learning_rate=5e-5,
                         num_generations=8, loss_type="dapo", max_tokens=96, temperature=1.0,
                         check_interval=0, save_steps=100, seed=0, prefix_cache=shared, refill=2, reward="success",
                         replay_weight=8.0, replay_rows=32, replay_focus="tools", rollout_backend="transformers")
    t0 = time.perf_counter()
    log = train(config)
    rows = [r for r in log["history"] if "update_s" in r]
    result["shared" if shared else "padded"] = {
        "wall_s": round(time.perf_counter() - t0, 1), "update_s": [r["update_s"] for r in rows],
        "rollout_s": [r["rollout_s"] for r in rows], "loss": [r["loss"] for r in rows],
        "replay_nll": [r.get("replay_nll") for r in rows], "reward": [r["reward"] for r in rows],
        "completion_mean_length": [r["completions/mean_length"] for r in rows]}
    print(json.dumps(result), flush=True)
out_json.write_text(json.dumps(result, indent=1) + "\n")
