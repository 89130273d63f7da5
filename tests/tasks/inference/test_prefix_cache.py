"""Shared-prefix KV reuse (tasks/inference/prefix_cache.py) with the real embedded model: the same texts as the
old left-padded path, prefill done once per shared prefix, a stale or foreign cache never reused, and a prompt
too long for the model named by its task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.schemas import Task
from flywheel.tasks.agents.agent import openai_tools
from flywheel.tasks.data.generate import generate_candidates
from flywheel.tasks.data.seeds import env_paths, load_seeds, load_tools
from flywheel.tasks.evaluation.rollouts import rollout_seed, run_batch
from flywheel.tasks.inference.prefix_cache import PrefixStore, common_prefix
from flywheel.tasks.inference.protocol import Request, Sampling, as_text_chat
from flywheel.tasks.training.train import single_turn_envs


def _tasks(env: str, n: int) -> list[Task]:
    seeds_path, tools_path = env_paths(env)
    tools = load_tools(tools_path) if tools_path.is_file() else {}
    rows, _ = generate_candidates(range(n), load_seeds(seeds_path, tools), tools, 5)
    return [Task.model_validate_json(r["task"]) for r in rows]


def _requests(tasks: list[Task]) -> list[Request]:
    return [Request([m.model_dump(exclude_none=True) for m in t.messages], openai_tools(t), rollout_seed(0, t.id, 0),
                    label=f"task {t.id}") for t in tasks]


@pytest.fixture(scope="module")
def model():
    from flywheel.tasks.inference.hf import HFChatModel

    return HFChatModel(None)


def _texts(model, requests: list[Request], sampling: Sampling, reuse: bool, fresh: bool = True) -> list[str]:
    from flywheel.tasks.inference.backends import TransformersBackend

    model.prefix_cache = reuse
    if fresh:
        model.store = PrefixStore()
    return [g.text for g in TransformersBackend(None, 16, loaded=model).generate(requests, sampling)]


def test_store_matches_exact_token_prefixes_only_and_forgets_other_identities() -> None:
    import torch

    store = PrefixStore(max_bytes=1 << 20)
    store.check(("model-a",))
    kv = [(torch.zeros(1, 1, 4, 2), torch.ones(1, 1, 4, 2))]
    store.put([1, 2, 3, 4], kv)
    assert store.match([1, 2, 3, 9, 9]) == (3, (1, 2, 3, 4))
    assert store.match([2, 2, 3]) == (0, None)
    assert store.get((1, 2, 3, 4), 3)[0][0].shape == (1, 1, 3, 2)
    store.check(("model-a",))
    assert store.entries
    store.check(("model-b",))  # another model, tokenizer, adapter or weights version: nothing is reused
    assert not store.entries and store.match([1, 2, 3]) == (0, None)
    big = [(torch.zeros(1, 1, 80_000, 2), torch.zeros(1, 1, 80_000, 2))]
    store.put([5], kv)
    store.put([6], big)  # over the byte budget: the least recently used entries go first
    assert list(store.entries) == [(6,)]
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    store.put([7, 8], kv)
    store.put([7, 8, 9], kv)  # an agent's next turn: the stored earlier turn is a prefix of it, and goes
    assert (7, 8) not in store.entries and store.match([7, 8, 1]) == (2, (7, 8, 9))
    store.put([7], kv)  # a shorter sequence is kept beside the longer one
    assert (7,) in store.entries and (7, 8, 9) in store.entries


@pytest.mark.slow
def test_greedy_texts_are_byte_identical_with_and_without_reuse_in_every_single_turn_env(model) -> None:
    requests = [r for env in single_turn_envs() for r in _requests(_tasks(env, 4))]  # 4 of each: 2 batches of 16
    assert len(requests) == 4 * len(single_turn_envs())
    greedy = Sampling(temperature=0.0, top_p=1.0, max_tokens=12)
    old = _texts(model, requests, greedy, reuse=False)
    new = _texts(model, requests, greedy, reuse=True)
    assert model.store.reused_tokens > 0 and model.store.hits > len(requests) // 2
    assert new == old
    assert _texts(model, requests, greedy, reuse=True, fresh=False) == old  # served from a warm store


@pytest.mark.slow
def test_sampled_texts_repeat_with_the_same_seeds(model) -> None:
    requests = _requests(_tasks("tool_call", 12))
    sampling = Sampling(temperature=0.9, top_p=0.95, max_tokens=12)
    first = _texts(model, requests, sampling, reuse=True)
    assert _texts(model, requests, sampling, reuse=True) == first
    assert _texts(model, requests, sampling, reuse=True, fresh=False) == first
    other = [Request(r.messages, r.tools, r.seed + 1, label=r.label) for r in requests]
    assert _texts(model, other, sampling, reuse=True) != first  # the seeds do matter


@pytest.mark.slow
def test_g_copies_of_a_prompt_share_one_prefill(model) -> None:
    task = _tasks("tool_call", 1)[0]
    prompt = model.encode([as_text_chat([m.model_dump(exclude_none=True) for m in task.messages], openai_tools(task),
                                        False)])[0]
    model.prefix_cache, model.store = True, PrefixStore()
    completions = model.generate_ids([prompt] * 8, seed=3, temperature=1.0, top_p=1.0, max_new_tokens=12)
    assert model.store.prefilled_tokens == len(prompt) - 1  # once, not 8 times
    assert model.store.reused_tokens == 7 * (len(prompt) - 1)  # the first copy prefills, seven reuse
    assert len(completions) == 8 and len({tuple(c) for c in completions}) > 1  # 8 samples, not one repeated


@pytest.mark.slow
def test_an_agent_turn_reuses_the_previous_turn_and_its_reply(model) -> None:
    task = _tasks("tool_call", 1)[0]
    chat = as_text_chat([m.model_dump(exclude_none=True) for m in task.messages], openai_tools(task), True)
    greedy = (0, 0.0, 1.0, 16)
    model.prefix_cache, model.store = True, PrefixStore()
    first = model.generate([chat], *greedy)[0]
    turn2 = chat + [{"role": "assistant", "content": first.text}, {"role": "user", "content": 'Result: {"ok": 1}'}]
    before = model.store.reused_tokens
    second = model.generate([turn2], *greedy)[0]
    assert model.store.reused_tokens - before >= first.prompt_tokens  # the whole first turn came from the cache
    model.prefix_cache = False
    assert model.generate([turn2], *greedy)[0].text == second.text


@pytest.mark.slow
def test_a_cache_is_never_reused_for_other_weights_tokenizer_or_adapter(model) -> None:
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    from flywheel.tasks.inference.hf import HFChatModel

    requests = _requests(_tasks("tool_call", 4))
    greedy = Sampling(temperature=0.0, top_p=1.0, max_tokens=8)
    base = copy.deepcopy(model.model)
    live = HFChatModel.wrap(base, model.tokenizer, Path("live"))
    live.model.eval()
    _texts(live, requests, greedy, reuse=True)
    identity = live.identity()
    with torch.no_grad():  # what an optimizer step does: the weights change in place
        base.model.layers[0].self_attn.q_proj.weight.mul_(1.5)
    assert live.identity() != identity
    after = _texts(live, requests, greedy, reuse=True, fresh=False)
    assert live.store.identity == live.identity() and after == _texts(live, requests, greedy, reuse=False)
    other_tokenizer = HFChatModel.wrap(base, copy.deepcopy(model.tokenizer), Path("live"))
    assert other_tokenizer.identity() != live.identity()
    peft = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    peft.add_adapter("other", LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    adapted = HFChatModel.wrap(peft, model.tokenizer, Path("live"))
    first = adapted.identity()
    peft.set_adapter("other")
    assert adapted.identity() != first


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_names_its_task(model) -> None:
    from flywheel.tasks.inference.backends import TransformersBackend

    task = _tasks("tool_call", 1)[0]
    long = task.model_copy(update={"messages": [task.messages[0], task.messages[1].model_copy(
        update={"content": "please " * 9000})]})
    backend = TransformersBackend(None, 4, loaded=model)
    for reuse in (True, False):
        model.prefix_cache = reuse
        with pytest.raises(ValueError, match=rf"task {long.id}: its prompt is \d+ tokens .* context of 8192"):
            run_batch(backend, [(long, "", 0, 1)], Sampling(0.0, 1.0, 16), 1.0, 1)


@pytest.mark.gpu
def test_generation_runs_on_cuda_in_bf16_with_reuse() -> None:
    import torch

    from flywheel.tasks.inference.hf import HFChatModel

    gpu = HFChatModel(None)
    assert gpu.model.device.type == "cuda" and gpu.model.dtype == torch.bfloat16
    requests = _requests(_tasks("tool_call", 8))
    texts = _texts(gpu, requests, Sampling(0.0, 1.0, 16), reuse=True)
    assert len(texts) == 8 and gpu.store.reused_tokens > 0


@pytest.mark.slow
def test_lockstep_agent_episodes_repeat_and_batch_every_step(model) -> None:
    """Workplace episodes in an eval batch run in lockstep on the embedded model: each step of the episodes under
    way is one backend call, and the same seeds give the same trajectories from a cold or a warm store."""
    from flywheel.tasks.inference.backends import TransformersBackend

    tasks = _tasks("workplace", 4)
    items = [(t, "", 0, rollout_seed(0, t.id, 0)) for t in tasks]

    class Counting(TransformersBackend):
        sizes: list[int] = []

        def generate(self, requests, sampling):
            self.sizes.append(len(requests))
            return super().generate(requests, sampling)

    model.prefix_cache, model.store = True, PrefixStore()
    runs = []
    for _ in range(2):  # the second run starts from the first one's store
        backend = Counting(None, 16, loaded=model)
        backend.sizes = []
        rows = run_batch(backend, items, Sampling(0.7, 0.95, 24), 1.0, 3)
        assert len(backend.sizes) == max(r["steps"] for r in rows) and backend.sizes[0] == len(tasks)
        runs.append([(r["completion"], r["reward"], r["steps"]) for r in rows])
    assert runs[0] == runs[1]



def test_a_bad_prompt_lookup_is_one_clear_error_before_the_model_loads() -> None:
    from flywheel.tasks.inference.hf import HFChatModel

    for bad in (-1, 65):  # not the missing checkpoint's error: the setting is checked first
        with pytest.raises(ValueError, match=rf"prompt lookup of {bad} draft tokens: expected 0 \(off\) to 64"):
            HFChatModel("/no/such/checkpoint", prompt_lookup=bad)


@pytest.mark.slow
def test_prompt_lookup_drafts_a_lone_greedy_turn_from_the_kept_cache_and_leaves_batches_and_samples_alone(model):
    """An agent's turns one at a time (as `flywheel serve --prompt-lookup` gets them): fewer forward passes for
    the same tokens, the texts of plain greedy decoding, and the second turn prefills only what the first did not
    hold (transformers' own assisted decoding re-reads the whole prompt, and fed from a stored cache it read the
    prompt twice: garbage from the first token); a stop string and the token cap end it where plain decoding ends;
    a batch, a sampled request and a checkpoint whose generation config changes greedy choices decode as without."""
    calls: list[int] = []
    hook = model.model.register_forward_hook(lambda *_: calls.append(1))

    both = _tasks("workplace", 1) + _tasks("tool_call", 1)

    def turns(lookup: int, stop: tuple[str, ...] = (), cap: int = 24, tasks: list[Task] = both
              ) -> tuple[list[str], int, int, list[float]]:
        model.prefix_cache, model.store, model.lookup = True, PrefixStore(), lookup
        texts, tokens, calls[:], prefilled = [], 0, [], []
        for task in tasks:
            chat = as_text_chat([m.model_dump(exclude_none=True) for m in task.messages], openai_tools(task), True)
            first = model.generate([chat], 0, 0.0, 1.0, cap, stop=stop)[0]
            call = task.reference.calls[0]
            turn2 = chat + [{"role": "assistant", "content": json.dumps({"tool": call.tool, "args": call.args})},
                            {"role": "user", "content": json.dumps({"result": call.args})}]
            before = model.store.prefilled_tokens
            second = model.generate([turn2], 0, 0.0, 1.0, cap, stop=stop)[0]
            prefilled.append((model.store.prefilled_tokens - before) / len(model.encode([turn2])[0]))
            assert all(len(key) == kv[0][0].shape[2] for key, kv in model.store.entries.items())  # key = cache
            texts += [first.text, second.text]
            tokens += first.completion_tokens + second.completion_tokens
        return texts, tokens, len(calls), prefilled

    try:
        on, on_tokens, on_calls, on_prefilled = turns(10)
        off, off_tokens, off_calls, off_prefilled = turns(0)
        assert on == off and on_tokens == off_tokens
        assert off_calls > off_tokens  # one pass per token at least, plus the prefills
        assert on_calls < on_tokens, (on_calls, on_tokens)  # fewer passes than tokens: drafts were accepted
        assert on_prefilled == off_prefilled and 0 < max(on_prefilled) < 0.5  # turn 2 extends turn 1's cache
        for stop, cap in (((" ", "\""), 16), ((), 7)):  # the token that completes a stop string; the cap
            cut = turns(4, stop, cap, both[:1])
            assert cut[:2] == turns(0, stop, cap, both[:1])[:2] and cut[0] != on[:2]
        config, plain = model.model.generation_config, turns(0, cap=8, tasks=both[:1])[:2]
        config.repetition_penalty = 1.3  # changes greedy choices: transformers' own lookup, as without
        try:
            assert turns(4, cap=8, tasks=both[:1])[:2] == turns(0, cap=8, tasks=both[:1])[:2] != plain
        finally:
            config.repetition_penalty = 1.0
        requests = _requests(_tasks("tool_call", 3))
        for batches in ([requests], [requests, requests[:1]]):  # greedy in a batch; sampled in a batch and alone
            sampling = Sampling(0.0, 1.0, 16) if len(batches) == 1 else Sampling(0.9, 0.95, 16)
            model.lookup = 10
            with_lookup = [_texts(model, batch, sampling, reuse=True) for batch in batches]
            model.lookup = 0
            assert with_lookup == [_texts(model, batch, sampling, reuse=True) for batch in batches]
    finally:
        hook.remove()
        model.lookup = 0
