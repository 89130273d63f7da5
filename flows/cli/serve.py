"""Serving commands: ``serve`` (a checkpoint over an OpenAI-compatible API) and ``serve-env`` (an environment
as a resources server)."""

from __future__ import annotations

import typer

from flywheel.flows.cli.base import app, err, explain, fail


@app.command()
def serve(
    model: str = typer.Option(None, help="Checkpoint folder (default: the embedded SmolLM2-135M-Instruct)."),
    name: str = typer.Option("flywheel-policy", help="Model name the server answers to."),
    host: str = typer.Option("127.0.0.1", help="Bind address."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port."),
    prompt_lookup: int = typer.Option(0, min=0, max=64, help="Latency option for one request at a time (an "
                                      "agent's turns), greedy only: decode with drafts of up to this many tokens "
                                      "copied from the context, each checked in one pass, from the conversation's "
                                      "kept cache: the texts of plain greedy decoding in fewer passes "
                                      "(bench/results/throughput.md#lone-episode). 0: off."),
    max_body_kb: int = typer.Option(1024, min=1, help="Largest request body in KB (413 beyond)."),
    max_waiting: int = typer.Option(16, min=1, max=32, help="Chat requests allowed to wait for or hold the model "
                                    "at once (one generates at a time); 503 with Retry-After beyond."),
) -> None:
    """Serve a local checkpoint over an OpenAI-compatible API (/v1/chat/completions)."""
    import uvicorn

    from flywheel.tasks.inference.hf import HFChatModel
    from flywheel.tasks.inference.models import check_model
    from flywheel.tasks.inference.serving import create_app
    from flywheel.verifiers.common import one_line

    try:
        check_model(model)  # a bad folder: one line naming the file, before anything loads
    except (ValueError, OSError) as exc:
        fail(explain(exc))
    try:
        app_ = create_app(HFChatModel(model, prompt_lookup=prompt_lookup), name, max_body_kb, max_waiting)
    except Exception as exc:  # whatever the loaders raise for a model they cannot load (not a bug here): one line
        fail(f"cannot load --model {model or 'embedded'}: {one_line(exc, 600)}")
    err.print(f"serving {name} on http://{host}:{port}/v1", highlight=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@app.command("serve-env")
def serve_env(
    env: str = typer.Option("workplace", help="Environment to serve: one whose spec has a resources server "
                                              "(workplace)."),
    host: str = typer.Option("127.0.0.1", help="Bind address."),
    port: int = typer.Option(8100, help="Port."),
    max_sessions: int = typer.Option(4096, min=1, help="Open sessions allowed at once (429 beyond)."),
    session_ttl: float = typer.Option(600.0, min=0.001, help="Seconds a session may sit untouched "
                                                             "before it is dropped."),
    session_max_age: float = typer.Option(3600.0, min=0.001, help="Seconds after seeding when a session is dropped "
                                                                  "even if kept busy (404 expired)."),
    max_body_kb: int = typer.Option(256, min=1, help="Largest request body in KB (413 beyond)."),
    max_session_kb: int = typer.Option(256, min=1, help="Largest session in KB of memory: task, state and call log, "
                                                        "sized as JSON plus 96 bytes per value and key (413 for a "
                                                        "task over it; a call that would pass it is refused)."),
) -> None:
    """Serve an environment as a resources server: /seed_session, one endpoint per tool, /verify.

    Sessions hold at most --max-sessions x --max-session-kb of data: 4096 x 256 KB = 1 GiB by default."""
    import uvicorn

    from flywheel.verifiers.envs import env_names, get_env

    served = [name for name in env_names() if get_env(name).resources_server is not None]
    if env not in served:
        fail(f"--env {env!r} has no resources server; serve-env serves: {', '.join(served)}")
    serve = get_env(env).resources_server
    assert serve is not None  # an env in `served` has one
    app_ = serve(max_sessions=max_sessions, session_ttl_s=session_ttl, session_max_age_s=session_max_age,
                 max_body_kb=max_body_kb, max_session_kb=max_session_kb)
    err.print(f"serving the {env} environment on http://{host}:{port} (docs at /docs)", highlight=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning")

