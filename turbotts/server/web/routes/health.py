"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from turbotts.server.schemas import Health, Readiness, Ready
from turbotts.server.web.deps import EngineDep, MetricsDep, SettingsDep

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up and its event loop answers."""
    return Health(status="ok")


@router.get("/readyz", response_model=Ready, responses={503: {"model": Health}})
async def readyz(request: Request, engine: EngineDep, settings: SettingsDep) -> JSONResponse:
    """Ready for traffic: model loaded, engine thread alive, not draining; ``details`` has the real-time capacity."""
    if getattr(request.app.state, "is_draining", False):
        return JSONResponse(Health(status="unavailable", detail="shutting down").model_dump(), status_code=503)
    if not engine.is_alive:
        return JSONResponse(Health(status="unavailable", detail="engine thread stopped").model_dump(), status_code=503)
    stats = engine.stats
    details = Readiness(
        admission=settings.admission,
        realtime_capacity_streams=stats.realtime_capacity,
        is_capacity_measured=stats.is_capacity_measured,
        step_ms_by_batch={batch: round(1000 * step_s, 3) for batch, step_s in stats.step_s_by_batch.items()},
        running_sequences=stats.num_running,
        waiting_sequences=stats.num_waiting,
    )
    return JSONResponse(Ready(status="ok", details=details).model_dump())


@router.get("/metrics", response_class=Response)
async def metrics(metrics: MetricsDep, engine: EngineDep) -> Response:
    return Response(metrics.render(engine.stats), media_type=CONTENT_TYPE_LATEST)
