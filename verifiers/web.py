"""What every flywheel HTTP server does at its edge (``flywheel serve`` and ``flywheel serve-env``): a request body
over a size limit gets 413 before it is read whole, and a body that is not JSON, too deep to parse or not the
request model gets a one-line 4xx that names the field and never echoes the body. The client side is
``verifiers/fetch.py``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flywheel.verifiers.common import one_line


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``max_bytes``, by its Content-Length or, for a chunked body,
    as soon as the bytes read pass the limit; the body read is handed on to the app."""

    def __init__(self, app: ASGIApp, max_bytes: int, hint: str = "send a smaller request") -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.hint = hint

    async def _too_big(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = (f"request body is over the {self.max_bytes // 1024} KB limit (--max-body-kb): {self.hint} or "
                  "raise the limit")
        await JSONResponse({"detail": detail}, status_code=413, headers={"connection": "close"})(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_big(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._too_big(scope, receive, send)
                return
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _field(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if p != "body") or "body"


def guard(app: FastAPI, max_body_kb: int, hint: str = "send a smaller request") -> FastAPI:
    """``app`` with the body limit and one-line errors: 422 for a body that is not JSON or breaks the request model,
    400 for JSON nested too deeply to parse, an HTTPException's own detail otherwise."""
    app.add_middleware(BodyLimit, max_bytes=max_body_kb * 1024, hint=hint)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first: dict[str, Any] = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            return JSONResponse({"detail": "the body is not JSON "
                                           f"({first.get('ctx', {}).get('error', 'unreadable')})"}, 422)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return JSONResponse({"detail": f"{_field(tuple(first['loc']))}: {one_line(first['msg'])}{more}"}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail
        if isinstance(exc.__cause__, RecursionError):  # FastAPI's body parser hit Python's recursion limit
            detail = "the JSON body is nested too deeply to read: flatten it"
        return JSONResponse({"detail": detail}, exc.status_code, headers=getattr(exc, "headers", None))

    return app
