"""Records, seeds and rendering: ids are content hashes, bad seed lines name file and line."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from flywheel.schemas import Task
from flywheel.tasks.data.generate import task_row
from flywheel.tasks.data.seeds import SeedError, load_seeds, seed_task
from flywheel.tasks.data.validate import check_row


def test_task_id_is_content_hash_and_ignores_meta(catalog) -> None:
    tools, seeds = catalog
    task = seed_task(seeds[0], tools)
    again = Task.model_validate_json(task.model_dump_json())
    assert again.id == task.id and len(task.id) == 64
    moved = Task.model_validate({**task.model_dump(), "id": "", "meta": {**task.meta.model_dump(), "row_seed": 99}})
    assert moved.id == task.id
    changed = Task.model_validate({**task.model_dump(), "id": "", "env": "other"})
    assert changed.id != task.id


def test_task_rejects_wrong_id_and_unknown_fields(catalog) -> None:
    tools, seeds = catalog
    data = seed_task(seeds[0], tools).model_dump()
    with pytest.raises(ValidationError, match="does not match its content"):
        Task.model_validate({**data, "id": "0" * 64})
    with pytest.raises(ValidationError, match="extra"):
        Task.model_validate({**data, "colour": "red"})
    task = Task.model_validate(data)
    with pytest.raises(ValidationError):
        task.env = "x"  # frozen


def test_seed_set_shape(catalog) -> None:
    tools, seeds = catalog
    used = {t for s in seeds for t in s.tools}
    assert len(seeds) >= 40 and len(used) >= 8
    assert {t.safety for t in tools.values()} == {"read", "write", "destructive"}
    destructive = {n for n, t in tools.items() if t.safety == "destructive"}
    assert any(s.call.tool in destructive for s in seeds), "some requests need a destructive tool"
    assert any(s.call.tool not in destructive and destructive & set(s.tools) for s in seeds), \
        "some requests offer a destructive tool that would be unsafe"
    for seed in seeds:  # every seed's own example is a valid task with a full-reward reference
        task = seed_task(seed, tools)
        assert check_row(task_row(task, 0)) is None, seed.id


def test_malformed_seed_line_names_file_and_line(tmp_path, catalog) -> None:
    tools, seeds = catalog
    good = seeds[0].model_dump_json()
    path = tmp_path / "tool_call.jsonl"
    path.write_text(good + "\n\n" + json.dumps({"id": "x"}) + "\n")
    with pytest.raises(SeedError, match=r"tool_call.jsonl:3: "):
        load_seeds(path, tools)
    path.write_text(good + "\n" + good + "\n")
    with pytest.raises(SeedError, match=r":2: duplicate seed id"):
        load_seeds(path, tools)
    bad_tool = json.loads(good) | {"tools": ["nope.tool"], "call": {"tool": "nope.tool", "args": {}}}
    path.write_text(json.dumps(bad_tool) + "\n")
    with pytest.raises(SeedError, match=r":1: tools \['nope.tool'\] are not in the tool catalog"):
        load_seeds(path, tools)
    path.write_text("{not json\n")
    with pytest.raises(SeedError, match=r":1: "):
        load_seeds(path, tools)


@pytest.mark.parametrize("env", ["math", "cli"])
def test_other_env_seeds_are_valid_and_vary(env: str) -> None:
    from flywheel.tasks.data.generate import generate_candidates
    from flywheel.tasks.data.seeds import env_paths
    from flywheel.tasks.data.validate import validate_rows

    seeds = load_seeds(env_paths(env)[0], {})
    assert len(seeds) >= 20 and all(s.env == env and s.answer for s in seeds)
    for seed in seeds:
        assert check_row(task_row(seed_task(seed, {}), 0)) is None, seed.id
    rows, _ = generate_candidates(range(200), seeds, {}, run_seed=4)
    kept, rejects = validate_rows(rows)
    assert len(kept) == 200 and not rejects
    assert len({json.loads(r["task"])["reference"]["answer"] for r in rows}) > 100, "samplers must vary the answers"


@pytest.mark.parametrize("env", ["workplace", "code"])
def test_workplace_and_code_seeds_are_valid_and_vary(env: str) -> None:
    from flywheel.tasks.data.generate import generate_candidates
    from flywheel.tasks.data.seeds import env_paths, load_tools
    from flywheel.tasks.data.validate import validate_rows

    seeds_path, tools_path = env_paths(env)
    tools = load_tools(tools_path) if tools_path.is_file() else {}
    seeds = load_seeds(seeds_path, tools)
    assert len(seeds) >= 20 and len({s.category for s in seeds}) >= 4
    for seed in seeds:
        assert check_row(task_row(seed_task(seed, tools), 0)) is None, seed.id
    rows, _ = generate_candidates(range(120), seeds, tools, run_seed=4)
    kept, rejects = validate_rows(rows)  # the reference scores 1.0: replayed (workplace) or run in the sandbox (code)
    assert len(kept) == 120 and not rejects
    refs = [json.loads(r["task"])["reference"] for r in rows]
    varied = {json.dumps(r["final_state"] if env == "workplace" else [r["answer"], r["tests"]], sort_keys=True)
              for r in refs}
    assert len(varied) > 80, "samplers must vary the states and tests"
    again, _ = generate_candidates(range(120), seeds, tools, run_seed=4)
    assert again == rows, "same seed, same tasks"


def test_seed_env_rules(tmp_path) -> None:
    path = tmp_path / "math.jsonl"
    path.write_text(json.dumps({"id": "a", "category": "c", "templates": ["{x}?"], "slots": {"x": "int"},
                                "values": {"x": 1}, "call": {"tool": "t", "args": {}}, "tools": ["t"]}) + "\n")
    with pytest.raises(SeedError, match=r"math.jsonl:1: .*seeds give exactly \[.answer.\]"):
        load_seeds(path, {})
    weird = tmp_path / "chess.jsonl"
    weird.write_text("")
    with pytest.raises(SeedError, match="no verifier for env 'chess'"):
        load_seeds(weird, {})
