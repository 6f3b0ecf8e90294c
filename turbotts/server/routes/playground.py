"""``GET /``: the web playground, static files shipped in the package (no build step, no CDN).

The page talks to the public API only (``/v1/audio/speech`` with SSE, ``/v1/voices``) through
relative URLs, so it works wherever the server is mounted: behind a path prefix (a Ray Serve
route, a reverse proxy) as well as at the root. It is left out of the OpenAPI schema: it is a
client of the API, not part of it.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
STATIC_PREFIX = "/static"

router = APIRouter(include_in_schema=False)


@router.get("/")
async def playground() -> FileResponse:
    """The playground page; its scripts and styles come from ``/static``."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


def mount_static(app: FastAPI) -> list[str]:
    """Serve ``STATIC_DIR`` under ``/static``; returns the file paths, so access logs keep their names."""
    app.mount(STATIC_PREFIX, StaticFiles(directory=STATIC_DIR), name="static")
    return [f"{STATIC_PREFIX}/{path.name}" for path in sorted(STATIC_DIR.iterdir()) if path.is_file()]
