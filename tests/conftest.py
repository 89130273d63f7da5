"""Shared fixtures: one Prefect test harness per session (it costs ~9 s to start)."""

from __future__ import annotations

import os

for _key, _value in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                     "PREFECT_LOGGING_LEVEL": "WARNING", "GX_ANALYTICS_ENABLED": "false"}.items():
    os.environ.setdefault(_key, _value)

import pytest  # noqa: E402

from tasks.seeds import env_paths, load_seeds, load_tools  # noqa: E402


@pytest.fixture(scope="session")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def catalog():
    seeds_path, tools_path = env_paths("tool_call")
    tools = load_tools(tools_path)
    return tools, load_seeds(seeds_path, tools)
