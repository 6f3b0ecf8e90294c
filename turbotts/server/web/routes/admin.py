"""Operator endpoints: ``POST /admin/reload-blocklist`` (also on SIGHUP).

Protected by the API keys when authentication is on, and not rate limited.
"""

from __future__ import annotations

from fastapi import APIRouter

from turbotts.server.schemas import ErrorResponse, Reloaded
from turbotts.server.web.deps import ApiKeyDep, GuardsDep

router = APIRouter(prefix="/admin", tags=["operations"])


@router.post("/reload-blocklist", response_model=Reloaded, responses={400: {"model": ErrorResponse}, 401: {}})
async def reload_blocklist(guards: GuardsDep, _key: ApiKeyDep) -> Reloaded:
    """Read the blocklist file again; requests in flight keep the list they were checked with."""
    guards.reload_blocklist()
    return Reloaded(status="reloaded")
