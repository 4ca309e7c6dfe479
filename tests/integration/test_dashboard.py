"""The dashboard in real headless Chromium (DevTools protocol) against a daemon running
simulated sweeps on its loopback TCP listener, token required.

One page load, then only the page's own polling: it shows the running sweep with each host's
step, the sweep queued behind it, then without a reload the steps move, the sweep ends with its
answer and report links, and the queued one starts. The screenshot is kept (the test's tmp
dir; ``$ORCHESTRATOR_ARTIFACTS`` or ``out/artifacts/`` under ``CI``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_dashboard_support import (
    HOST_TYPE,
    TOKEN,
    Service,
    keep_artifact,
    service,
)
from tests.integration.test_report_support import PageSession, chromium_binary, devtools_page

pytestmark = pytest.mark.slow

PROBE = """JSON.stringify((() => {
  const text = (node) => node ? node.textContent.trim() : null;
  const hosts = (card) => [...card.querySelectorAll("tr[data-host]")].map((row) => ({
    host: row.dataset.host, config: text(row.querySelector(".config")),
    step: text(row.querySelector(".step")), points: text(row.querySelector(".points"))}));
  return {
    same_document: window.sameDocument === true,
    asks_token: !document.getElementById("token-form").hidden,
    polls: Number(document.getElementById("status").dataset.polls || 0),
    status: text(document.getElementById("status")),
    address: location.href,
    running: [...document.querySelectorAll("#running [data-sweep]")].map((card) => ({
      name: card.dataset.sweep, progress: text(card.querySelector(".progress")),
      best: text(card.querySelector(".best")), hosts: hosts(card)})),
    queued: [...document.querySelectorAll("#queue [data-sweep]")].map((c) => c.dataset.sweep),
    ended: [...document.querySelectorAll("#ended [data-sweep]")].map((card) => ({
      name: card.dataset.sweep, id: card.dataset.id, state: text(card.querySelector(".state")),
      answers: [...card.querySelectorAll(".answer")].map((a) => ({
        host_type: a.dataset.hostType, verdict: a.classList[1], text: text(a)})),
      reports: [...card.querySelectorAll(".reports a")].map((a) => a.getAttribute("href"))})),
  };
})())"""

Seen = dict[str, Any]


def running(seen: Seen, name: str) -> dict[str, Any] | None:
    return next((sweep for sweep in seen["running"] if sweep["name"] == name), None)


def ended(seen: Seen, name: str) -> dict[str, Any] | None:
    return next((sweep for sweep in seen["ended"] if sweep["name"] == name), None)


async def until(
    page: PageSession, svc: Service, what: str, check: Callable[[Seen], bool], timeout: float = 150
) -> Seen:
    """The page as probed, once ``check`` holds (a deadline, not a measurement)."""
    deadline = time.monotonic() + timeout
    while True:
        seen: Seen = await page.evaluate(PROBE)
        if check(seen):
            return seen
        if time.monotonic() > deadline:
            log = svc.daemon.log()[-3000:]
            raise AssertionError(f"the page never showed {what}: {seen}\n{log}")
        await asyncio.sleep(0.4)


def host_steps(seen: Seen, name: str) -> list[tuple[str, str | None, str | None]]:
    sweep = running(seen, name)
    return [(h["host"], h["step"], h["points"]) for h in sweep["hosts"]] if sweep else []


def measured(points: str | None) -> bool:
    """A host's points cell shows some measured: ``2/4``."""
    return bool(points) and points.split("/")[0] not in ("-", "0")


async def test_the_dashboard_follows_sweeps_without_a_reload(tmp_path: Path) -> None:
    binary = chromium_binary()
    png = tmp_path / "dashboard.png"
    with service(tmp_path, "127.0.0.176") as svc:
        first = svc.submit(svc.sweep_file("dash-first", configs=1, contexts=[60]))
        svc.submit(svc.sweep_file("dash-next", configs=3, contexts=[60, 512]))
        async with devtools_page(binary, tmp_path / "profile", window="1300,1200") as page:
            await page.load(svc.url(f"/dashboard/#token={TOKEN}"))
            await page.evaluate("JSON.stringify(window.sameDocument = true)")
            shown = await until(
                page,
                svc,
                "the first sweep's hosts at work and the next one queued",
                lambda s: len(host_steps(s, "dash-first")) == 2 and s["queued"] == ["dash-next"],
            )
            before = host_steps(shown, "dash-first")
            moved = await until(
                page,
                svc,
                "a host's step or points move",
                lambda s: host_steps(s, "dash-first") not in ([], before),
            )
            answered = await until(
                page, svc, "the first sweep's answer", lambda s: bool(ended(s, "dash-first"))
            )
            later = await until(
                page,
                svc,
                "the next sweep measuring",
                lambda s: any(measured(points) for _, _, points in host_steps(s, "dash-next")),
            )
            await page.screenshot(png)
            assert not page.exceptions and not page.console, (page.exceptions, page.console)
        assert svc.get(f"/sweeps/{first['id']}/report?format=html")[0] == 200
    kept = keep_artifact(png)
    print(f"dashboard screenshot: {png}" + (f" (kept as {kept})" if kept else ""))

    assert all(seen["same_document"] for seen in (shown, moved, answered, later))
    assert shown["polls"] < moved["polls"] < answered["polls"] <= later["polls"]
    assert "token" not in shown["address"]  # taken out of the address bar at once
    assert not any(seen["asks_token"] for seen in (shown, moved, answered, later))
    assert not later["queued"] and running(later, "dash-next") is not None
    assert shown["running"][0]["progress"].startswith("progress: trials ")
    done = ended(answered, "dash-first")
    assert done is not None and done["state"] == "done"
    (answer,) = done["answers"]
    assert answer["host_type"] == HOST_TYPE and answer["verdict"] in ("better", "tie")
    assert answer["text"].startswith(HOST_TYPE)
    assert [href.split("?")[0] for href in done["reports"]] == [
        f"http://127.0.0.1:{svc.port}/sweeps/{first['id']}/report"
    ] * 2
    assert png.stat().st_size > 10_000


def test_the_page_loads_without_the_token_and_shows_nothing_without_it(tmp_path: Path) -> None:
    """The page and its files hold no data and load as any page does; what it shows, and the
    metrics, answer only with the token (a browser sends none until the page does)."""
    with service(tmp_path, None) as svc:
        for path in ("/dashboard/", "/dashboard/static/dashboard.js"):
            status, body = svc.get(path, token=None)
            assert status == 200 and b"token" in body
        assert svc.get("/dashboard/static/../../sweeps", token=None)[0] in (403, 404)
        for path in ("/dashboard/state", "/metrics", "/sweeps"):
            assert svc.get(path, token=None)[0] == 401
            assert svc.get(path, token="not-the-token")[0] == 401
        status, body = svc.get("/dashboard/state")
        document = json.loads(body)
        assert status == 200
        assert (document["queued"], document["running"], document["ended"]) == ([], [], [])
        status, body = svc.get("/dashboard", token=None)  # redirected to the slash
        assert status == 200 and body.startswith(b"<!doctype html>")
