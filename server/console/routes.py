"""Where a browser goes: `/` leads to the console, `/docs` is the API reference, `/guide/` the docs site, all
served from this process's own files (nothing is fetched from another host)."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

PAGES = Path(__file__).parent / "static"
# The docs site `mkdocs build` makes: in the checkout (scripts/setup.sh builds it; `make docs` rebuilds it), or
# where $RESPONSES_SERVER_DOCS_SITE says (the Docker image builds it there).
DOCS_SITE = Path(os.environ.get("RESPONSES_SERVER_DOCS_SITE")
                 or Path(__file__).resolve().parents[2] / "build" / "docs-site")
# What a browser may load without a key: pages and their assets hold no data; every call they make needs one.
OPEN_PREFIXES = ("/console", "/guide", "/docs", "/api-reference-assets/")
OPEN_PAGES = frozenset({"/", "/openapi.json"})


def install(app: FastAPI, docs_site: Path = DOCS_SITE) -> None:
    """Mount the console, the API reference (Swagger UI from a pinned package) and the docs site on `app`."""
    app.mount("/console", StaticFiles(directory=PAGES, html=True), name="console")
    app.mount("/api-reference-assets", StaticFiles(directory=_swagger_assets()), name="api-reference-assets")
    if (docs_site / "index.html").is_file():
        app.mount("/guide", StaticFiles(directory=docs_site, html=True), name="guide")
    else:
        app.add_api_route("/guide/{rest:path}", _docs_missing, include_in_schema=False)

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/console/")

    @app.get("/docs", include_in_schema=False)
    async def api_reference() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="responses-server API reference",
                                   swagger_js_url="/api-reference-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/api-reference-assets/swagger-ui.css",
                                   swagger_favicon_url="/console/favicon.svg")


def _swagger_assets() -> Path:
    """Swagger UI 5's files, as the pinned `fastapi-offline` package carries them."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


async def _docs_missing(rest: str = "") -> HTMLResponse:
    return HTMLResponse("<!doctype html><title>Docs not built</title><p>The docs site is not built here: run "
                        "<code>make docs</code> (scripts/setup.sh does), then reload.", status_code=404)
