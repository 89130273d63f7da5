import json, os, sys, time
import polars as pl
from flywheel.schemas import Task
from flywheel.tasks.inference.policy import start_vllm
from flywheel.tasks.inference.protocol import Request, Sampling
CK = "/root/.cache/flywheel/smollm2-135m-instruct"
tasks = [Task.model_validate_json(t) for t in pl.read_parquet("/tmp/fullds/tool_call/v-4326ea0a789b/heldout.parquet")["task"][:48]]
reqs = [Request([m.model_dump(exclude_none=True) for m in t.messages], [{"type": "function", "function": {"name": x.name, "description": x.description, "parameters": x.parameters}} for x in t.tools], 7 + i) for i, t in enumerate(tasks)]
out = {}
for k in ("0", "4"):
    os.environ["FLYWHEEL_VLLM_NGRAM"] = k
    e = start_vllm(CK, 0.1)
    t0 = time.time(); g = e.generate(reqs, Sampling(0.0, 1.0, 96)); tg = time.time() - t0
    t0 = time.time(); s1 = e.generate(reqs[:16], Sampling(1.0, 1.0, 64)); ts = time.time() - t0
    e.close()
    out[k] = {"greedy": [x.text for x in g], "sampled": [x.text for x in s1], "greedy_s": round(tg, 2), "sampled_s": round(ts, 2)}
    print(k, out[k]["greedy_s"], out[k]["sampled_s"], flush=True)
same = sum(a == b for a, b in zip(out["0"]["greedy"], out["4"]["greedy"]))
same_s = sum(a == b for a, b in zip(out["0"]["sampled"], out["4"]["sampled"]))
print("RES", json.dumps({"greedy_identical": same, "of": len(reqs), "sampled_identical": same_s, "of_s": 16,
                         "times": {k: (v["greedy_s"], v["sampled_s"]) for k, v in out.items()}}))
for a, b in zip(out["0"]["greedy"], out["4"]["greedy"]):
    if a != b: print("DIFF\n", a[:200], "\n", b[:200]); break
