"""The API's documentation pages, /docs (Swagger UI) and /redoc, served with no network: their
scripts and styles come from the fastapi-offline package's files, mounted under ``ASSETS_URL``,
instead of FastAPI's default CDN links (a blank page on a machine without internet)."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
_ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
# no validator badge: Swagger UI would load it from validator.swagger.io
_SWAGGER_PARAMETERS = {"validatorUrl": None}


def install_docs_pages(app: FastAPI) -> None:
    """Mount the assets and add /docs, its OAuth2 redirect and /redoc (``app`` made with
    ``docs_url=None, redoc_url=None``)."""
    app.mount(ASSETS_URL, StaticFiles(directory=_ASSETS_DIR), name="docs-assets")
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    def root(request: Request) -> str:  # behind a proxy that strips a prefix, links keep it
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        base = root(request)
        return get_swagger_ui_html(openapi_url=f"{base}{app.openapi_url}", title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url=f"{base}{redirect_url}",
                                   swagger_js_url=f"{base}{ASSETS_URL}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{base}{ASSETS_URL}/swagger-ui.css",
                                   swagger_favicon_url=f"{base}{ASSETS_URL}/favicon.png",
                                   swagger_ui_parameters=_SWAGGER_PARAMETERS)

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        base = root(request)
        return get_redoc_html(openapi_url=f"{base}{app.openapi_url}", title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{base}{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{base}{ASSETS_URL}/favicon.png", with_google_fonts=False)
