"""The web playground through the Ray Serve proxy: page, scripts, voices and streamed speech all
pass through the ingress to the replicas, and the browser plays what comes back."""

from __future__ import annotations

from typing import Any

from tests.browser import chromium_browser
from tests.server.test_playground_browser import WAIT_MS


def test_the_playground_plays_through_the_ray_endpoint(ray_url: str) -> None:
    with chromium_browser() as browser:
        page = browser.new_page()
        outside: list[str] = []
        page.on("request", lambda r: None if r.url.startswith((ray_url, "blob:", "data:")) else outside.append(r.url))
        page.goto(f"{ray_url}/")
        page.wait_for_function("window.turbottsPlayground && window.turbottsPlayground.voicesLoaded")
        assert "alloy" in page.eval_on_selector_all("#voice option", "els => els.map(e => e.value)")
        page.fill("#text", "Hello through Ray. Every request goes through the proxy.")
        page.fill("#seed", "5")
        page.click("#play")
        page.wait_for_function(
            "(() => { const l = window.turbottsPlayground.last; return l && (l.isFinished || l.error); })()",
            timeout=WAIT_MS,
        )
        last: dict[str, Any] = page.evaluate("window.turbottsPlayground.last")
    assert last["error"] is None
    assert last["receivedS"] > 0 and last["playedS"] >= 0.9 * last["receivedS"]
    assert last["peakLevel"] > 0.001
    assert outside == []
