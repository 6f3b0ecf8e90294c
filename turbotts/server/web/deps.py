"""Typed dependencies: everything a route needs comes from the app state built in ``lifespan``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from turbotts.engine.async_engine import AsyncEngine
from turbotts.errors import AuthenticationError
from turbotts.guard.apikeys import APIKeyStore, bearer_token
from turbotts.server.ops.context import request_id_var
from turbotts.server.ops.guard_wiring import Guards
from turbotts.server.ops.metrics import Metrics
from turbotts.server.settings import ServerSettings
from turbotts.server.speech.service import SpeechService
from turbotts.server.voices.service import VoiceService


def get_settings(connection: HTTPConnection) -> ServerSettings:
    settings: ServerSettings = connection.app.state.settings
    return settings


def get_engine(connection: HTTPConnection) -> AsyncEngine:
    engine: AsyncEngine = connection.app.state.engine
    return engine


def get_voice_service(connection: HTTPConnection) -> VoiceService:
    service: VoiceService = connection.app.state.voice_service
    return service


def get_service(connection: HTTPConnection) -> SpeechService:
    service: SpeechService = connection.app.state.service
    return service


def get_metrics(connection: HTTPConnection) -> Metrics:
    metrics: Metrics = connection.app.state.metrics
    return metrics


def get_guards(connection: HTTPConnection) -> Guards:
    guards: Guards = connection.app.state.guards
    return guards


def get_request_id() -> str:
    return request_id_var.get()


def require_api_key(connection: HTTPConnection) -> str | None:
    """The caller's key id, or None when authentication is off.

    Raises:
        AuthenticationError: keys are configured and the request has no valid one.
    """
    keys: APIKeyStore = connection.app.state.api_keys
    if not keys.is_enabled:
        return None
    key = keys.verify(bearer_token(connection.headers.get("authorization")))
    if key is None:
        raise AuthenticationError("missing or invalid API key; send 'Authorization: Bearer <key>'")
    return key


async def check_rate_limit(connection: HTTPConnection, key_id: str | None) -> None:
    """Raises: RateLimitedError (429) when the client's address or API key is over its limit."""
    guards: Guards = connection.app.state.guards
    client_ip = connection.client.host if connection.client is not None else None
    await guards.rate_limits.check(client_ip, key_id)


async def require_access(connection: HTTPConnection) -> str | None:
    """Authentication, then rate limits: the key id (None when authentication is off).

    Raises:
        AuthenticationError, RateLimitedError.
    """
    key_id = require_api_key(connection)
    await check_rate_limit(connection, key_id)
    return key_id


SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
EngineDep = Annotated[AsyncEngine, Depends(get_engine)]
ServiceDep = Annotated[SpeechService, Depends(get_service)]
VoiceServiceDep = Annotated[VoiceService, Depends(get_voice_service)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
RequestIdDep = Annotated[str, Depends(get_request_id)]
GuardsDep = Annotated[Guards, Depends(get_guards)]
ApiKeyDep = Annotated[str | None, Depends(require_api_key)]
AccessDep = Annotated[str | None, Depends(require_access)]  # authenticated and within the rate limits
