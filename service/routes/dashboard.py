"""The one-page dashboard at ``/``: a static HTML file whose script loads the run's learning curve
(/admin/passes?since=) when it opens, then polls it, /admin/status and /metrics."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(tags=["dashboard"])


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard() -> HTMLResponse:
    # Read per request (a few KB): no module-level state, and an edited page shows on reload.
    page = (Path(__file__).resolve().parent.parent / "static" / "index.html").read_text(encoding="utf-8")
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})
