"""A real browser follows a subscription: headless Chromium loads a page whose JavaScript
opens a native ``EventSource`` with a stream token (``?access_token=``, no Authorization
header), receives events, and after the gateway restarts on the same port reconnects with
``Last-Event-ID`` and receives what was committed meanwhile, each event once.

The page is served by a small local server (another origin: the gateway allows it with
``cors_origins``) and reports what it received by POSTing there. Chromium comes from
``infra/local/chromium.sh`` (``make services``); without it the test skips, or fails
under ``CI=true``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

import reventless as rv
from reventless.subscribe import Subscriptions
from tests.gateway.conftest import auth, serve
from tests.services import free_port, unavailable
from tests.subscribe.conftest import order_rows, orders_app

ACME = auth("acme-token-1")

PAGE = """<!doctype html>
<html><body><pre id="log"></pre><script>
const got = [], frames = [];
let seq = 0;
function report() {
  seq += 1;
  fetch("/report", {method: "POST", headers: {"Content-Type": "application/json"},
                    body: JSON.stringify({seq, got, frames})});
}
const es = new EventSource(STREAM_URL);
es.onopen = () => { frames.push("open"); report(); };
es.onerror = () => { frames.push("error"); report(); };
es.addEventListener("event", (e) => {
  got.push([e.lastEventId, JSON.parse(e.data).offset, JSON.parse(e.data).data.qty]);
  report();
});
es.addEventListener("closed", (e) => {
  const reason = JSON.parse(e.data).reason;
  frames.push("closed:" + reason);
  if (reason !== "shutdown") es.close();  // shutdown: let the browser reconnect
  report();
});
</script></body></html>
"""


def _chromium() -> str:
    path = os.environ.get("REVENTLESS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        unavailable(f"Chromium is not installed at {path} (bash infra/local/chromium.sh)")
    return path


class _Page:
    """The page's server: serves the page, collects its reports."""

    def __init__(self, stream_url: str) -> None:
        self.stream_url = stream_url
        self.report: dict[str, Any] = {"seq": 0, "got": [], "frames": []}
        self.changed = asyncio.Event()

    async def index(self, _: Request) -> Response:
        return HTMLResponse(PAGE.replace("STREAM_URL", json.dumps(self.stream_url)))

    async def post(self, request: Request) -> Response:
        data = await request.json()
        if data["seq"] > self.report["seq"]:  # fetches may land out of order
            self.report = data
            self.changed.set()
        return JSONResponse({})

    async def until(self, what: str, check: Any) -> dict[str, Any]:
        async def wait() -> dict[str, Any]:
            while not check(self.report):
                self.changed.clear()
                await self.changed.wait()
            return self.report

        try:
            return await asyncio.wait_for(wait(), 30)
        except TimeoutError:
            raise AssertionError(f"the page never reported {what}: {self.report}") from None


@contextlib.asynccontextmanager
async def _page_server(page: _Page, port: int) -> AsyncIterator[None]:
    app = Starlette(routes=[Route("/", page.index), Route("/report", page.post, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    server.capture_signals = contextlib.nullcontext  # type: ignore[assignment,method-assign]
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def _browser(url: str, profile: Path) -> AsyncIterator[None]:
    proc = await asyncio.create_subprocess_exec(
        _chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
        url,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,  # its renderer and helpers share this process group
    )  # fmt: skip
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def test_a_browser_eventsource_follows_a_subscription_across_a_restart(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app, topic = orders_app(url)
    gw_port, page_port = free_port(), free_port()
    page_origin = f"http://127.0.0.1:{page_port}"
    cors = {"cors_origins": (page_origin,)}
    acme = rv.Metadata(tenant="acme")
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(app)
        await topic.publish(order_rows(5), meta=acme)
        await topic.publish(order_rows(3, start=100), meta=rv.Metadata(tenant="globex"))
        first = contextlib.AsyncExitStack()
        base = await first.enter_async_context(serve(url, port=gw_port, **cors))
        async with httpx.AsyncClient(base_url=base) as http:
            sid = (
                await http.post("/subscriptions", json={"topic": "orders"}, headers=ACME)
            ).json()["id"]
            r = await http.post(f"/subscriptions/{sid}/stream-tokens", headers=ACME)
            assert r.status_code == 201, r.text
            token = r.json()["token"]
            # the token opens this one stream only, and is no bearer token
            r = await http.get(f"/subscriptions/{sid}?access_token={token}")
            assert r.status_code == 401
        page = _Page(f"{base}/subscriptions/{sid}/stream?access_token={token}")
        await stack.enter_async_context(_page_server(page, page_port))
        await stack.enter_async_context(_browser(page_origin, tmp_path / "chrome"))
        await page.until("5 events", lambda p: len(p["got"]) >= 5)

        await first.aclose()  # the gateway stops with the browser connected
        await page.until("the shutdown", lambda p: "closed:shutdown" in p["frames"])
        await topic.publish(order_rows(5, start=5), meta=acme)  # committed while it is down
        async with serve(url, port=gw_port, **cors):  # the same port, a new process state
            report = await page.until("10 events", lambda p: len(p["got"]) >= 10)
        offsets = [*range(1, 6), *range(9, 14)]  # 6-8: globex's, not for acme's token
        assert report["got"] == [[str(o), o, q] for q, o in enumerate(offsets)], "once, in order"
        assert report["frames"].count("open") >= 2, report["frames"]
    async with Subscriptions.from_url(url) as subs:
        assert (await subs.get(sid)).acked == 0, "it resumed from Last-Event-ID, not an ack"
