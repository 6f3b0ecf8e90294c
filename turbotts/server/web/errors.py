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
    IdleTimeoutError,
    InputTooLongError,
    InvalidInputError,
    OverloadedError,
    QueueFullError,
    RateLimitedError,
    ReferenceAudioError,
    ReferenceTooLargeError,
    ServiceUnavailableError,
    SSMLError,
    TurboTTSError,
    UnknownModelError,
    VoiceExistsError,
    VoiceMixError,
    VoiceNotFoundError,
)
from turbotts.redaction import describe_exception

logger = logging.getLogger(__name__)

# (status, type, code), most specific class first
_MAPPING: tuple[tuple[type[BaseException], int, str, str], ...] = (
    (InputTooLongError, 413, "invalid_request_error", "input_too_long"),
    (ReferenceTooLargeError, 413, "invalid_request_error", "reference_too_large"),
    (ReferenceAudioError, 400, "invalid_request_error", "invalid_reference_audio"),
    (VoiceMixError, 400, "invalid_request_error", "invalid_voice_mix"),
    (UnknownModelError, 404, "invalid_request_error", "model_not_found"),
    (VoiceNotFoundError, 404, "invalid_request_error", "voice_not_found"),
    (VoiceExistsError, 409, "invalid_request_error", "voice_exists"),
    (ContentFilteredError, 400, "invalid_request_error", "content_filtered"),
    (SSMLError, 400, "invalid_request_error", "invalid_ssml"),
    (InvalidInputError, 400, "invalid_request_error", "invalid_input"),
    (IdleTimeoutError, 408, "invalid_request_error", "idle_timeout"),
    (AuthenticationError, 401, "authentication_error", "invalid_api_key"),
    (RateLimitedError, 429, "rate_limit_error", "rate_limit_exceeded"),
    (OverloadedError, 503, "server_error", "overloaded"),
    (QueueFullError, 503, "server_error", "overloaded"),
    (ServiceUnavailableError, 503, "server_error", "unavailable"),
    (EngineError, 500, "server_error", "engine_error"),
    (TurboTTSError, 500, "server_error", "internal_error"),
)
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "model_type", "dict_type"})
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
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":  # loc is ("body", character offset)
        where = f" at character {loc[-1]}" if len(loc) > 1 else ""
        reason = first.get("ctx", {}).get("error", "JSON decode error")
        message = f"the request body is not valid JSON ({reason}{where}); send one JSON object"
        return _response(422, error_body(message, "invalid_request_error", "invalid_json"))
    names = [str(part) for part in loc if part not in ("body", "query", "path")]
    param = ".".join(names) or None
    msg = str(first.get("msg", "invalid request"))
    if param:
        message = f"{param}: {msg}"
    elif loc == ("body",):
        message = _body_message(str(first.get("type")), msg, request.headers.get("content-type"))
    else:
        message = msg
    return _response(422, error_body(message, "invalid_request_error", "validation_error", param))


def _body_message(kind: str, msg: str, content_type: str | None) -> str:
    """What is wrong with the body as a whole: missing, not JSON, or not an object."""
    if kind == "missing":
        return "the request body is empty; send a JSON object with Content-Type: application/json"
    if kind not in _NOT_AN_OBJECT:  # the object was read; a check across fields failed
        return msg
    if content_type is None or "json" not in content_type.lower():
        shown = f"Content-Type {content_type[:100]!r}" if content_type else "no Content-Type"
        return f"the request body must be a JSON object sent with Content-Type: application/json, not {shown}"
    return f"the request body must be a JSON object ({msg})"


def _parse_failure(cause: BaseException) -> str:
    """Why FastAPI could not read a JSON body (it answers 400 with the exception as the cause)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the request body is not valid UTF-8 (byte {cause.start}); send UTF-8 JSON"
    if isinstance(cause, RecursionError):
        return "the request body nests too deeply to parse; send a flat JSON object"
    return f"the request body cannot be parsed as JSON ({str(cause).split(';')[0][:200]})"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
    detail = exc.detail if isinstance(exc, StarletteHTTPException) else "error"
    type_ = _HTTP_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    headers = getattr(exc, "headers", None)
    if status == 400 and exc.__cause__ is not None:  # the body could not be decoded at all
        return _response(400, error_body(_parse_failure(exc.__cause__), type_, "invalid_json"))
    message = str(detail)
    if status == 404 and detail == "Not Found":
        message = f"no route {request.method} {request.url.path[:200]}; the API is described at /docs"
    elif status == 405:
        allowed = (headers or {}).get("Allow", "")
        message = f"method {request.method} is not allowed on {request.url.path[:200]}; use {allowed or 'another'}"
    return _response(status, error_body(message, type_, f"http_{status}"), headers)


def unexpected_error(exc: Exception) -> tuple[int, dict[str, Any]]:
    """Log an exception no handler expected (its message as a digest) and give its status and body."""
    logger.error("unexpected error: %s", describe_exception(exc), exc_info=exc)  # handlers digest the traceback
    return describe(exc)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's catch-all, outside the middleware; the request-context middleware answers first."""
    return _response(*unexpected_error(exc))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(TurboTTSError, _turbotts_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
