"""A hand-written HTTP server on 127.0.0.1, for answers the fake judge never gives (a 403, a
redirect, an HTTP-date Retry-After, a 409, a dropped connection, ...)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """Serve `handler` at POST /v1/chat/completions in this event loop; yields the base URL
    (http://127.0.0.1:PORT/v1)."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
