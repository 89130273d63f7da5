"""`backend=openai` sends the worker's $OPENAI_API_KEY as a bearer token. The base URL is a run's parameter that
anyone who may start a run types in the Prefect UI. Before: the key went to whatever host was typed there. Now
(`tasks/inference/backends.py: check_key_destination`): only to the official API, a server on this machine, or a
base URL the worker's operator listed in $FLYWHEEL_OPENAI_BASE_URLS; anything else is one line before any
connection."""

from __future__ import annotations

import pytest

from flywheel.tasks.inference.backends import KEY_BASE_URLS, OpenAIBackend


@pytest.fixture(autouse=True)
def _no_list(monkeypatch) -> None:
    monkeypatch.delenv(KEY_BASE_URLS, raising=False)


@pytest.mark.parametrize("url", ["https://collector.example/v1", "https://api.openai.com.collector.example/v1",
                                 "http://api.openai.com/v1", "https://api.openai.com:8443/v1",
                                 "https://api.openai.com/v1/../../steal", "http://10.0.0.5:8000/v1"])
def test_the_key_never_goes_to_a_typed_base_url(url) -> None:
    with pytest.raises(ValueError, match=f"--base-url .*: the API key \\(\\$OPENAI_API_KEY\\) is sent only to "
                                         f"https://api.openai.com/v1, .* listed in \\${KEY_BASE_URLS}"):
        OpenAIBackend(url, "m", api_key="sk-secret")


@pytest.mark.parametrize("url", ["https://api.openai.com/v1", "https://API.openai.com:443/v1/",
                                 "http://127.0.0.1:8000/v1", "http://localhost:9/v1", "http://[::1]:8000/v1"])
def test_the_official_api_and_local_servers_get_the_key(url) -> None:
    backend = OpenAIBackend(url, "m", api_key="sk-secret")
    assert backend.client.headers["Authorization"] == "Bearer sk-secret"
    assert backend.client.follow_redirects is False  # an allowed server cannot pass the key on


def test_the_operator_lists_other_base_urls_and_no_key_goes_anywhere(monkeypatch) -> None:
    monkeypatch.setenv(KEY_BASE_URLS, " https://llm.internal.example/v1/ ,http://10.0.0.5:8000/v1")
    for url in ("https://llm.internal.example/v1", "http://10.0.0.5:8000/v1"):
        OpenAIBackend(url, "m", api_key="sk-secret")
    with pytest.raises(ValueError, match="listed in"):  # the list names base URLs, not hosts
        OpenAIBackend("https://llm.internal.example/other", "m", api_key="sk-secret")
    monkeypatch.delenv(KEY_BASE_URLS)
    backend = OpenAIBackend("https://collector.example/v1", "m", api_key=None)  # no key: nothing to leak
    assert backend.client.headers["Authorization"] == "Bearer EMPTY"


def test_an_eval_refused_for_its_base_url_leaves_the_folder_s_report(tmp_path, tool_dataset, monkeypatch) -> None:
    """The eval flow removed OUT/report.json before it built the backend, so a base URL refused for the key (a
    deployment run skips the CLI) still cost the folder its earlier report."""
    from flywheel.flows.config import EvalConfig
    from flywheel.flows.eval import eval_policy

    out = tmp_path / "ev"
    out.mkdir()
    (out / "report.json").write_text("{}")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    with pytest.raises(ValueError, match="the API key"):
        eval_policy.fn(EvalConfig(dataset=tool_dataset, out=str(out), backend="openai", model="m",
                                  base_url="https://collector.example/v1", limit=2))
    assert (out / "report.json").read_text() == "{}"
