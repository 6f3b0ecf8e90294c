"""The one place exceptions become HTTP responses, in OpenAI's error shape::

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

Every error the service can raise is mapped here, so a client (the official
``openai`` package included) sees a JSON body with a meaningful status and never
an HTML page or a bare 500 for its own mistakes.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from turbotts.errors import (
    AuthenticationError,
    ContentFilteredError,
    EngineError,
    InputTooLongError,
    InvalidInputError,
    OverloadedError,
    QueueFullError,
    RateLimitedError,
    TurboTTSError,
    UnknownModelError,
    VoiceExistsError,
    VoiceNotFoundError,
)
from turbotts.redaction import describe_exception

logger = logging.getLogger(__name__)

# (status, type, code), most specific class first
_MAPPING: tuple[tuple[type[BaseException], int, str, str], ...] = (
    (InputTooLongError, 413, "invalid_request_error", "input_too_long"),
    (UnknownModelError, 404, "invalid_request_error", "model_not_found"),
    (VoiceNotFoundError, 404, "invalid_request_error", "voice_not_found"),
    (VoiceExistsError, 409, "invalid_request_error", "voice_exists"),
    (ContentFilteredError, 400, "invalid_request_error", "content_filtered"),
    (InvalidInputError, 400, "invalid_request_error", "invalid_input"),
    (AuthenticationError, 401, "authentication_error", "invalid_api_key"),
    (RateLimitedError, 429, "rate_limit_error", "rate_limit_exceeded"),
    (OverloadedError, 503, "server_error", "overloaded"),
    (QueueFullError, 503, "server_error", "overloaded"),
    (EngineError, 500, "server_error", "engine_error"),
    (TurboTTSError, 500, "server_error", "internal_error"),
)
_HTTP_TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def describe(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and body for any exception (also used for WebSocket error messages)."""
    for cls, status, type_, code in _MAPPING:
        if isinstance(exc, cls):
            param = getattr(exc, "param", None)
            return status, error_body(str(exc), type_, code, param)
    message = "internal server error; retry, and report it if it persists"
    return 500, error_body(message, "server_error", "internal_error")


def _response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


async def _turbotts_error(request: Request, exc: Exception) -> JSONResponse:
    status, body = describe(exc)
    if status >= 500 and not isinstance(exc, OverloadedError):  # refusals are counted, not logged one by one
        logger.error("request failed: %s", describe_exception(exc))  # its message may quote the request
    headers: dict[str, str] | None = None
    if status in (429, 503):
        headers = {"Retry-After": retry_after_header(getattr(exc, "retry_after_s", 1.0))}
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return _response(status, body, headers)


def retry_after_header(seconds: float) -> str:
    """Whole seconds, rounded up, at least 1 (``Retry-After`` takes no fractions)."""
    return str(max(1, math.ceil(seconds)))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    param = ".".join(loc) or None
    message = f"{param}: {first.get('msg', 'invalid request')}" if param else str(first.get("msg", "invalid request"))
    return _response(422, error_body(message, "invalid_request_error", "validation_error", param))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
    detail = exc.detail if isinstance(exc, StarletteHTTPException) else "error"
    type_ = _HTTP_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return _response(status, error_body(str(detail), type_, f"http_{status}"), getattr(exc, "headers", None))


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.error("unexpected error: %s", describe_exception(exc), exc_info=exc)  # handlers digest the traceback
    status, body = describe(exc)
    return _response(status, body)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(TurboTTSError, _turbotts_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
