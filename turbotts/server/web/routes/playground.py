"""``GET /``: the web playground, static files shipped in the package (no build step, no CDN).

The page talks to the public API only (``/v1/audio/speech`` with SSE, ``/v1/voices``) through
relative URLs, resolved against a ``<base>`` that this route sets from the ASGI ``root_path``.
So the page works wherever the app is mounted: behind a path prefix (a Ray Serve route prefix,
a reverse proxy that sets ``root_path``) as well as at the root. It is left out of the OpenAPI
schema: it is a client of the API, not part of it.
"""

from __future__ import annotations

import functools
import html
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
STATIC_PREFIX = "/static"
_BASE_TAG = '<base href="/">'

router = APIRouter(include_in_schema=False)


@functools.cache
def _index_html() -> str:
    text = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    if _BASE_TAG not in text:
        raise RuntimeError(f"{STATIC_DIR / 'index.html'} lost its {_BASE_TAG} line; the page needs it")
    return text


@router.get("/", response_class=HTMLResponse)
async def playground(request: Request) -> HTMLResponse:
    """The playground page; its scripts and styles come from ``/static`` under the same prefix."""
    root_path = str(request.scope.get("root_path", "")).rstrip("/")
    page = _index_html().replace(_BASE_TAG, f'<base href="{html.escape(root_path, quote=True)}/">')
    return HTMLResponse(page, headers={"Cache-Control": "no-cache"})


def mount_static(app: FastAPI) -> list[str]:
    """Serve ``STATIC_DIR`` under ``/static``; returns the file paths, so access logs keep their names."""
    app.mount(STATIC_PREFIX, StaticFiles(directory=STATIC_DIR), name="static")
    return [f"{STATIC_PREFIX}/{path.name}" for path in sorted(STATIC_DIR.iterdir()) if path.is_file()]
