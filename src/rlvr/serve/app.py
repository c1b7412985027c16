"""The web layer: a FastAPI app on a uvicorn server running on a background thread.

Routes: ``POST /v1/episodes/<id>/chat/completions`` (an episode's requests: an agent is given the base URL
``http://HOST:PORT/v1/episodes/<id>``, which the stock ``openai`` client extends with ``/chat/completions``),
``GET /v1/episodes/<id>/models``, and for manual use (``rlvr serve``) ``POST /v1/chat/completions`` and
``GET /v1/models``; ``GET /health``.  Errors are OpenAI-style JSON: 400 (a bad or refused request), 404 (an
unknown episode or route), 410 (an episode that has ended), 413 (a body over ``max_request_bytes``), 503 (the
run has stopped; sent with ``x-should-retry: false`` so that clients do not retry).

FastAPI and uvicorn are imported only here, when a server is made (the ``serve`` extra).
"""

# no `from __future__ import annotations`: FastAPI reads the route functions' annotations at run time

import errno
import socket
import threading
import time

from rlvr.serve.backend import Backend
from rlvr.serve.chat import ApiError, error_json, parse_request
from rlvr.utils.extras import require_extra

__all__ = ["create_app", "Server", "ServeError", "SERVE_MISSING", "bind", "check_installed"]

SERVE_MISSING = "the OpenAI-compatible endpoint needs FastAPI and uvicorn: pip install 'rlvr[serve]'"


class ServeError(RuntimeError):
    """The endpoint cannot start (port in use, missing extra); the message is one line."""


def _web():
    try:
        return require_extra("fastapi", SERVE_MISSING, cause=True), require_extra("uvicorn", SERVE_MISSING, cause=True)
    except ImportError as e:
        raise ServeError(str(e)) from None


def create_app(backend: Backend):
    """The FastAPI application answering for ``backend``."""
    fastapi, _ = _web()
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    app = fastapi.FastAPI(title="rlvr policy endpoint", docs_url=None, redoc_url=None, openapi_url=None)
    limit = backend.options.max_request_bytes

    def refuse(e: ApiError) -> JSONResponse:
        headers = {"x-should-retry": "false"} if e.status == 503 else None
        return JSONResponse(e.body(), status_code=e.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, exc):  # unknown routes and methods, as OpenAI-style JSON
        return JSONResponse(error_json(f"{request.method} {request.url.path}: {exc.detail}",
                                       "not_found_error" if exc.status_code == 404 else "invalid_request_error"),
                            status_code=exc.status_code)

    async def body_of(request) -> bytes:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > limit:
            raise ApiError(413, f"request body of {size} bytes is over this endpoint's limit of {limit} bytes",
                           code="request_too_large")
        chunks, n = [], 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > limit:
                raise ApiError(413, f"request body is over this endpoint's limit of {limit} bytes",
                               code="request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    async def chat(request, episode_id):
        try:
            backend._check_open()
            req = parse_request(await body_of(request))
            return JSONResponse(await backend.complete(episode_id, req))
        except ApiError as e:
            return refuse(e)

    def models() -> dict:
        return {"object": "list", "data": [{"id": backend.options.model_name, "object": "model", "created": 0,
                                            "owned_by": "rlvr"}]}

    @app.post("/v1/episodes/{episode_id}/chat/completions")
    async def episode_chat(episode_id: str, request: fastapi.Request):
        return await chat(request, episode_id)

    @app.post("/v1/chat/completions")
    async def plain_chat(request: fastapi.Request):
        return await chat(request, None)

    @app.get("/v1/episodes/{episode_id}/models")
    async def episode_models(episode_id: str):
        with backend.lock:
            known = episode_id in backend.episodes
        if not known:
            return refuse(ApiError(404, f"unknown episode {episode_id!r}", type="not_found_error",
                                   code="unknown_episode"))
        return models()

    @app.get("/v1/models")
    async def list_models():
        return models()

    @app.get("/health")
    async def health():
        with backend.lock:
            open_eps = sum(1 for e in backend.episodes.values() if not e.closed)
        body = {"status": "stopped" if backend.stopped else "ok", "episodes_open": open_eps}
        return JSONResponse(body, status_code=503 if backend.stopped else 200)

    return app


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port), or :class:`ServeError` in one line."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        why = "the port is in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise ServeError(f"cannot serve on {host}:{port}: {why} (choose another port; 0 picks a free one)") from None
    return sock


def check_installed() -> None:
    """:class:`ServeError` naming the pip line when FastAPI or uvicorn is missing."""
    _web()


class Server:
    """``backend``'s app served by uvicorn on a daemon thread; :meth:`start` returns once it accepts."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.host, self.port = backend.options.host, backend.options.port
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (the port chosen once started)."""
        return f"http://{self.host}:{self.port}"

    def episode_url(self, episode_id: str) -> str:
        """The base URL an agent's OpenAI client is given for episode ``episode_id``."""
        return f"{self.url}/v1/episodes/{episode_id}"

    def start(self, timeout: float = 30.0, sock: socket.socket | None = None) -> "Server":
        """Serve on ``sock`` (from :func:`bind`) or on a socket bound to the backend's host and port."""
        _, uvicorn = _web()
        app = create_app(self.backend)
        sock = sock or bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="rlvr-serve", daemon=True)
        self._thread.start()
        t0 = time.monotonic()
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() - t0 > timeout:
                raise ServeError(f"the endpoint on {self.url} did not start within {timeout:g} s")
            time.sleep(0.01)
        return self

    def stop(self, reason: str = "the run has stopped") -> None:
        """Refuse requests (503), then shut the server down."""
        self.backend.stop(reason)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.backend.shutdown()

    def __enter__(self) -> "Server":
        return self.start() if self._server is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
