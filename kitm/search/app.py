"""The search web app (FastAPI): one HTML page with its script and style, and the JSON API the page calls.

| route | what |
|---|---|
| GET / | the page (static/index.html, app.js, style.css) |
| GET /api/info | the index: counts, model, relevance source, each faiss index's kind and recall, the limits |
| POST /api/search/text | body {"query": "...", "k": 10}: the nearest images, scores, graded relevance |
| GET /api/search/text?q=...&k=10 | the same for a short query typed into a URL |
| POST /api/search/image?k=10 | body: the image file's bytes; the nearest captions and images |
| GET /api/search/image/{n}?k=10 | the same for indexed image n |
| GET /api/thumbnail/{n} | image n's thumbnail |
| GET /api/docs | this table as a page (offline: FastAPI's Swagger page loads its script from a CDN) |
| GET /api/openapi.json | the OpenAPI schema of these routes |

The page opens on a query with `/?q=a+red+circle&k=20` (filled in and searched).

Errors answer {"error": "<message>"} with a 4xx status (an empty or over-long query, a non-image upload, too large
a body, an unknown image) and the server goes on serving; bodies are read up to a bound, never whole first. Under
overload (more than `--max_in_flight` requests at once) a request is answered at once with 503, the same JSON error
and a `Retry-After` header; a body slower than `--body_timeout_s` gets 408, and a connection whose headers are not
in within `--header_timeout_s` is closed (`kitm.search.settings`).
"""

from __future__ import annotations

import asyncio
import gc
import html
import importlib.util
import json
import pathlib

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from kitm.search.engine import MAX_QUERY_CHARS, MAX_UPLOAD_BYTES, QueryError, Searcher
from kitm.search.settings import ServingSettings

STATIC = pathlib.Path(__file__).resolve().with_name("static")
_MAX_JSON_BYTES = 4 * MAX_QUERY_CHARS + 200_000


async def _bounded_body(request, limit: int, what: str, seconds: float) -> bytes:
    """The request's body, refused (413) past `limit` bytes and (408) when it is not in within `seconds`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise QueryError(f"The {what} is {int(declared):,} bytes; at most {limit:,} are accepted.", 413)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise QueryError(f"The {what} is more than {limit:,} bytes; at most {limit:,} are accepted.", 413)
                chunks.append(chunk)
    except TimeoutError:
        raise QueryError(f"The {what} did not arrive within {seconds:g} s ({size:,} bytes came).", 408) from None
    return b"".join(chunks)


class InFlightLimit:
    """ASGI middleware: at most `settings.max_in_flight` requests in the app at once; the next ones are answered at
    once with 503, the API's JSON error and `Retry-After` (uvicorn's own limit answers plain text and counts idle
    connections too, so a crowd of slow clients would turn everyone away)."""

    def __init__(self, app, settings: ServingSettings):
        self.app = app
        self.settings = settings
        self.in_flight = 0
        self.refused = 0
        message = (f"The server is busy: {settings.max_in_flight} requests are being answered. Retry after "
                   f"{settings.retry_after_s} s.")
        self._body = json.dumps({"error": message}).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.in_flight >= self.settings.max_in_flight:
            self.refused += 1
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(self._body)).encode()),
                                    (b"retry-after", str(self.settings.retry_after_s).encode())]})
            await send({"type": "http.response.body", "body": self._body})
            return None
        self.in_flight += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def _routes_page() -> str:
    """The module docstring's table of routes as a small HTML page (no script, nothing fetched from elsewhere)."""
    rows = [line.strip("|").split("|") for line in __doc__.splitlines()
            if line.startswith("| ") and not line.startswith("| route")]
    cells = "".join(f"<tr><td><code>{html.escape(route.strip())}</code></td><td>{html.escape(what.strip())}</td></tr>"
                    for route, what in rows)
    return ("<!doctype html><meta charset='utf-8'><title>kitm search API</title><link rel='stylesheet' "
            "href='/static/style.css'><h1>kitm search: the JSON API</h1><table><tr><th>route</th><th>what</th></tr>"
            f"{cells}</table><p>Errors answer <code>{{\"error\": \"...\"}}</code> with a 4xx status. The schema: "
            "<a href='/api/openapi.json'>/api/openapi.json</a>; examples and limits: docs/search.md (\"The JSON "
            "API\") in kitm's repository.</p>")


def create_app(searcher: Searcher):
    """The FastAPI app serving `searcher`."""
    # FastAPI's /docs page loads Swagger UI's script and style from a CDN, so offline (where kitm runs) it is blank,
    # and the package ships no copy to serve: /api/docs is this module's table of routes instead, served from here.
    app = FastAPI(title="kitm search", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    settings = searcher.settings
    app.add_middleware(InFlightLimit, settings=settings)

    @app.exception_handler(QueryError)
    async def query_error(request: Request, error: QueryError):
        return JSONResponse({"error": str(error)}, status_code=error.status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):  # a bug must not take the server down
        return JSONResponse({"error": f"The search failed: {type(error).__name__}: {error}"}, status_code=500)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/api/docs", include_in_schema=False)
    async def api_docs():
        return HTMLResponse(_routes_page())

    @app.get("/api/info")
    async def info():
        return searcher.info()

    # The answers are plain dicts of JSON types: JSONResponse writes them as they are (FastAPI's own encoding walks
    # them again to make them JSON-safe, a few percent of a request under load).
    @app.post("/api/search/text")
    async def search_text_post(request: Request):
        body = await _bounded_body(request, _MAX_JSON_BYTES, "request body", settings.body_timeout_s)
        try:
            payload = json.loads(body or b"{}")
        except ValueError:  # not JSON, not UTF-8, or an integer of more than 4,300 digits (Python's bound)
            raise QueryError('The body must be JSON: {"query": "a red circle", "k": 10}.') from None
        if not isinstance(payload, dict) or "query" not in payload:
            raise QueryError('The body must be a JSON object with a "query": {"query": "a red circle", "k": 10}.')
        return JSONResponse(await searcher.search_text_async(payload["query"], payload.get("k", 10)))

    @app.get("/api/search/text")
    async def search_text_get(q: str = "", k: str = "10"):
        return JSONResponse(await searcher.search_text_async(q, k))

    @app.post("/api/search/image")
    async def search_image_post(request: Request, k: str = "10"):
        data = await _bounded_body(request, MAX_UPLOAD_BYTES, "image", settings.body_timeout_s)
        return JSONResponse(await run_in_threadpool(searcher.search_image_bytes, data, k))

    @app.get("/api/search/image/{position}")
    async def search_image_get(position: str, k: str = "10"):
        return JSONResponse(await searcher.search_indexed_image_async(position, k))

    @app.get("/api/thumbnail/{position}")
    async def thumbnail(position: str):
        data, media_type = searcher.thumbnail(position)
        return Response(data, media_type=media_type, headers={"Cache-Control": "max-age=3600"})

    return app


def header_timeout_protocol(base: type, seconds: float) -> type:
    """uvicorn's HTTP protocol `base`, closing a connection whose next request's line and headers are not in within
    `seconds` of its opening or of its last response (a client trickling its headers byte by byte holds a
    connection, and uvicorn waits for headers without a bound). A request being answered is left alone: its body
    has `--body_timeout_s`."""

    class HeaderTimeoutProtocol(base):
        _header_timer = None

        def _arm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(seconds, self._headers_too_slow)

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            cycle = getattr(self, "cycle", None)
            if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm_header_timer()

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_header_timer()

        def connection_lost(self, exc):
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


def serve(searcher: Searcher, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning",
          sock=None) -> None:
    """Serve the app with uvicorn until interrupted; on `sock` (bound and listening) where given, else on
    `host`:`port`. httptools parses HTTP where installed (uvicorn's choice), else h11."""
    import uvicorn
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    # The model, the index and the libraries are Python objects that live as long as the server: moved
    # out of the collector's reach (gc.freeze), they are not walked again by every full collection, which under
    # load came every 2 s and stopped all requests for about 300 ms (benchmarks/bench_search_load.py, 50 clients:
    # p99 358 ms before, see docs/search.md).
    gc.collect()
    gc.freeze()
    parser = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    base = import_from_string(HTTP_PROTOCOLS[parser])
    config = uvicorn.Config(create_app(searcher), host=host, port=port, log_level=log_level,
                            http=header_timeout_protocol(base, searcher.settings.header_timeout_s),
                            timeout_keep_alive=5, backlog=2048)
    uvicorn.Server(config).run(sockets=None if sock is None else [sock])
