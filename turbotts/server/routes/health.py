"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from turbotts.server.deps import EngineDep, MetricsDep
from turbotts.server.schemas import Health

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up and its event loop answers."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
async def readyz(request: Request, engine: EngineDep) -> JSONResponse:
    """Ready for traffic: model loaded, engine thread alive, not draining."""
    if getattr(request.app.state, "is_draining", False):
        return JSONResponse(Health(status="unavailable", detail="shutting down").model_dump(), status_code=503)
    if not engine.is_alive:
        return JSONResponse(Health(status="unavailable", detail="engine thread stopped").model_dump(), status_code=503)
    return JSONResponse(Health(status="ok").model_dump())


@router.get("/metrics", response_class=Response)
async def metrics(metrics: MetricsDep, engine: EngineDep) -> Response:
    return Response(metrics.render(engine.stats), media_type=CONTENT_TYPE_LATEST)
