"""The host's side of the harness's nonce protocol (``verifiers/harness.py`` is the other side): the pipes, the
conversation, and which lines are accepted.

Contract:
- ``Channel`` is the host's end of the harness's stdin and stdout: queued non-blocking writes and whole lines read
  back under one wall-clock deadline and a byte cap on everything received. ``close()`` releases its selector
  (an epoll fd): the caller closes it, not the garbage collector.
- ``converse`` drives one run: it sends the program and the limits, then one test at a time with a fresh random
  nonce, and accepts exactly one reply per request carrying that nonce. Its first line is trusted because the
  harness writes it before any of the candidate's code runs: ``hello`` (the limits hold; from now on anything
  that goes wrong is the candidate's, ``RunResult.started``) or ``limits_error`` (``SandboxError``: the host's
  hard limits are below the sandbox's, an infrastructure failure). Every later line is untrusted data: one that
  is not the reply to the outstanding request (unsolicited, duplicated, out of order, malformed) is
  ``tampering``, and an error must be exactly ``Failure``'s ``{"type": str, "errno": int | None, "message": str}``.
- Nothing here raises for anything the candidate writes; values are any JSON, compared later by the verifier.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class SandboxError(RuntimeError):
    """The sandbox could not run (missing bwrap, namespaces refused, limits refused): an infrastructure failure."""


class Failure(BaseModel):
    """An exception as the harness describes it. Strict: the candidate chooses an exception's errno and can write
    lines of its own, so anything else (a list for errno, a missing field) is a line the harness did not write."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type: str
    errno: int | None
    message: str


@dataclass
class RunResult:
    events: list[dict[str, Any]] = field(default_factory=list)  # accepted replies, as the verifier reads them
    exit_code: int | None = None  # the sandbox's exit status when it ended on its own (128+N: killed by signal N)
    timed_out: bool = False
    overflow: bool = False
    tampering: str | None = None  # why the channel's lines cannot be trusted; the run then scores 0
    started: bool = False  # the harness said hello: from then on, anything that goes wrong is the candidate's
    stderr: str = ""
    seconds: float = 0.0


class Channel:
    """The host's end of the harness's pipes: queued writes and whole lines read back, under one deadline and a
    byte cap. ``line()`` returns None at end of file, timeout or overflow; the flags say which."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: float, cap: int) -> None:
        assert proc.stdin and proc.stdout
        self.stdin, self.stdout, self.deadline, self.cap = proc.stdin, proc.stdout, deadline, cap
        os.set_blocking(self.stdin.fileno(), False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.stdout, selectors.EVENT_READ)
        self.pending = bytearray()
        self.partial = bytearray()
        self.lines: deque[bytes] = deque()
        self.received = 0
        self.eof = self.timed_out = self.overflow = False

    def send(self, message: dict[str, Any]) -> None:
        if not self.pending and not self.stdin.closed:
            self.selector.register(self.stdin, selectors.EVENT_WRITE)
        self.pending += json.dumps(message).encode() + b"\n"

    def line(self) -> bytes | None:
        while not self.lines:
            if self.eof or self.overflow:
                return None
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                return None
            for key, _ in self.selector.select(timeout=left):
                if key.fileobj is self.stdin:
                    self._write()
                else:
                    self._read()
        return self.lines.popleft()

    def drain(self) -> bool:
        """Read what the sandbox has written and nobody asked for yet; True when there is any."""
        os.set_blocking(self.stdout.fileno(), False)
        try:
            self._read()
        except BlockingIOError:
            pass
        return bool(self.lines or self.partial)

    def close(self) -> None:
        """Release the selector's epoll fd now: the selector sits in a reference cycle (its own key mapping), so
        without this the fd would stay open until a full garbage collection, one more per run."""
        self.selector.close()

    def _write(self) -> None:
        try:
            del self.pending[:os.write(self.stdin.fileno(), self.pending)]
        except BrokenPipeError:
            self.pending.clear()  # the harness is gone: its end of file says so
        if not self.pending:
            self.selector.unregister(self.stdin)

    def _read(self) -> None:
        data = os.read(self.stdout.fileno(), 65536)
        if not data:
            self.eof = True
            return
        self.received += len(data)
        if self.received > self.cap:
            self.overflow = True
            return
        *whole, rest = (bytes(self.partial) + data).split(b"\n")
        self.lines.extend(whole)
        self.partial = bytearray(rest)


def _parse(line: bytes | None) -> dict[str, Any] | None:
    if line is None:
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # junk, or nesting deep enough to exhaust the host's stack
        return {}
    return message if isinstance(message, dict) else {}


def limits_error(message: str) -> SandboxError:
    return SandboxError(f"the sandbox could not set its limits: {message}; raise this host's hard limit (`ulimit -H`, "
                        "the container's or service's limits) or lower the sandbox's")


def converse(channel: Channel, code: str, entry_point: str, inputs: list[list[Any]],
             limits: dict[str, tuple[int, int]], result: RunResult) -> str:
    """Drive the harness's protocol, filling ``result``: "finished" when every request was answered, "failed to
    load" after a syntax or load error, "stopped" when the sandbox stopped answering (end of file, timeout,
    overflow) or tampered. Raises ``SandboxError`` when the harness could not set ``limits`` on itself."""
    channel.send({"code": code, "entry_point": entry_point, "limits": limits})
    hello = _parse(channel.line())
    if hello is None:
        return "stopped"
    if _limits_refused(hello):  # written before the candidate's code exists in the sandbox: the harness's own line
        raise limits_error(hello["message"][:300])
    result.started = True
    if hello != {"event": "hello"}:
        result.tampering = "the sandbox's first line was not the harness's hello"
        return "stopped"
    loaded = _parse(channel.line())
    if loaded is None:
        return "stopped"
    if loaded.get("event") in ("syntax_error", "load_error") and loaded.keys() == {"event", "error"}:
        error = _failure(loaded["error"])
        if error is None:
            result.tampering = "a load failure whose error is not the harness's {type, errno, message}"
            return "stopped"
        result.events.append({"event": loaded["event"], "error": error})
        return "failed to load"
    if loaded != {"event": "ready"}:
        result.tampering = "a line on the result channel before the program had loaded"
        return "stopped"
    for i, args in enumerate(inputs):
        nonce = secrets.token_hex(16)
        channel.send({"nonce": nonce, "args": args})
        reply = _parse(channel.line())
        if reply is None:
            return "stopped"
        if not _answers(reply, nonce):
            result.tampering = (f"test {i}: a line that is not the one reply to its request "
                                "(forged, duplicated or out of order)")
            return "stopped"
        if "value" in reply:
            result.events.append({"event": "test", "i": i, "value": reply["value"]})
            continue
        error = _failure(reply["error"])
        if error is None:
            result.tampering = f"test {i}: an error that is not the harness's {{type, errno, message}}"
            return "stopped"
        result.events.append({"event": "test", "i": i, "error": error})
        if error["type"] == "MemoryError":
            break  # the process's memory is spent: the remaining tests count as failed
    nonce = secrets.token_hex(16)
    channel.send({"nonce": nonce, "finish": True})
    finished = _parse(channel.line())
    if finished is None:
        return "stopped"
    if finished != {"nonce": nonce, "event": "finished"}:
        result.tampering = "a line that is not the one reply to the final request (forged, duplicated or out of order)"
        return "stopped"
    return "finished"


def _limits_refused(message: dict[str, Any]) -> bool:
    return (message.get("event") == "limits_error" and message.keys() == {"event", "message"}
            and isinstance(message["message"], str))


def _answers(reply: dict[str, Any], nonce: str) -> bool:
    return reply.get("nonce") == nonce and len(reply) == 2 and ("value" in reply or "error" in reply)


def _failure(error: Any) -> dict[str, Any] | None:
    """The error as a plain dict of the exact shape ``Failure``; None when it has any other shape."""
    try:
        return Failure.model_validate(error).model_dump()
    except ValidationError:
        return None
