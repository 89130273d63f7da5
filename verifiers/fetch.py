"""The client side of flywheel's HTTP (the judge, the OpenAI-compatible policy backend, the agents' env
server): a POST that ends within its deadline however slowly the server sends, and holds at most a byte cap of reply.
httpx only, so importing it costs nothing a verifier would notice."""

from __future__ import annotations

import time
from typing import Any

MAX_REPLY_BYTES = 4 << 20  # a chat completion, an observation or a verdict is a few KB; more is a broken server


def bounded_post(client: Any, url: str, body: dict[str, Any], timeout_s: float,
                 max_bytes: int = MAX_REPLY_BYTES) -> tuple[int, bytes]:
    """(status, body) of one POST through ``client`` (an ``httpx.Client``, or the ``httpx`` module) that ends within
    ``timeout_s`` however slowly the server sends (httpx's own timeout is per read: a byte every few seconds kept it
    waiting for ever), and holds at most ``max_bytes`` of reply (ValueError beyond)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    with client.stream("POST", url, json=body, timeout=timeout_s) as response:
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) > max_bytes:
                raise ValueError(f"reply larger than {max_bytes} bytes")
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"no complete reply within {timeout_s:g} s")
        return response.status_code, bytes(data)
