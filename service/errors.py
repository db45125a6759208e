"""The service's one error handler: every failure answers ``{"error": {code, message, detail}}``.

StreamrecError subclasses carry their own code and HTTP status; request validation errors
become ``invalid_input`` (422) naming each offending field; unknown routes and methods keep
their status; anything else is a bug, answered 500 and counted.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from core.errors import InvalidInput, StreamrecError
from core.logs import request_id

log = logging.getLogger("streamrec.service")


def _describe_validation(exc: RequestValidationError) -> StreamrecError:
    fields = []
    parts = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e.get("loc", ())) or "<request>"
        fields.append(where)
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    shown = "; ".join(parts[:5]) + (f"; and {len(parts) - 5} more" if len(parts) > 5 else "")
    return InvalidInput(f"invalid request: {shown}", detail={"fields": fields[:50]})


def error_response(err: StreamrecError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.http_status == 401 else {}
    rid = request_id.get()
    if rid is not None:  # a 500 is sent outside the access-log middleware, which adds it to the others
        headers["X-Request-ID"] = rid
    return JSONResponse({"error": err.to_dict()}, status_code=err.http_status, headers=headers)


async def handle_error(request: Request, exc: Exception) -> JSONResponse:
    """The one handler (registered for every exception kind the app can meet)."""
    if isinstance(exc, RequestValidationError):
        err = _describe_validation(exc)
    elif isinstance(exc, StreamrecError):
        err = exc
    elif isinstance(exc, HTTPException) and isinstance(exc.__cause__, StreamrecError):
        err = exc.__cause__  # FastAPI wraps errors raised while reading the body (e.g. our size limit)
    elif isinstance(exc, HTTPException) and isinstance(exc.__cause__, RecursionError):
        err = InvalidInput("request body: JSON nested too deeply to decode (arrays and objects nest at most a few "
                           "levels in any request)", detail={"field": "body"})
    elif isinstance(exc, HTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 413: "invalid_input"}.get(exc.status_code, "http_error")
        err = StreamrecError(str(exc.detail))
        err.code, err.http_status = code, exc.status_code
    else:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        err = StreamrecError(f"internal error: {type(exc).__name__}")
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None and not _unrouted_404(request, err):
        metrics.count_error(err.code)
    return error_response(err)


def _unrouted_404(request: Request, err: StreamrecError) -> bool:
    """A 404 for a path no route serves (a browser's /favicon.ico, a crawler's guess): not a
    failure of the service, so not counted as an error; the latency histogram still shows it
    under route ``<unmatched>``."""
    return err.http_status == 404 and request.scope.get("route") is None


def install_error_handler(app: FastAPI) -> None:
    for kind in (RequestValidationError, StreamrecError, HTTPException, Exception):
        app.add_exception_handler(kind, handle_error)
