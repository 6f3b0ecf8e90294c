"""The web playground at ``/``, driven in Debian's Chromium against a real server on the tiny model.

Nothing is mocked: the page streams ``POST /v1/audio/speech`` (SSE) from the server on loopback
and plays it; the tests read what the page measured (``window.turbottsPlayground.last``) and
what the audio graph heard (the analyser's peak level), and click what a user clicks.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.browser import chromium_browser
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH

TEXT = "Hello there. The playground streams every sentence. Captions follow the audio."
NUM_SENTENCES = 3
WAIT_MS = 120_000  # an upper bound for a slow CI machine, never a speed assertion
PREFIX = "/tts"  # a Ray Serve route prefix
SCREENSHOT_ENV = "TURBOTTS_PLAYGROUND_SCREENSHOT"  # where test_screenshot saves the picture on docs/http/playground.md


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # no watermark: its payload carries the minute, so the download could differ from a later request
    server = running_server(
        tmp_path_factory.mktemp("playground"), max_new_tokens=40, max_segment_chars=40, watermark=False
    )
    with server as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium_browser() as launched:
        yield launched


@pytest.fixture()
def page(browser: Any, server_url: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 960, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    elsewhere: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    local = (server_url, "blob:", "data:")
    opened.on("request", lambda r: None if r.url.startswith(local) else elsewhere.append(r.url))
    opened.goto(f"{server_url}/")
    opened.wait_for_function("window.turbottsPlayground && window.turbottsPlayground.voicesLoaded")
    yield opened
    context.close()
    assert errors == [], f"the page threw: {errors}"
    assert elsewhere == [], "every request goes to the server itself"


def _play(page: Any, text: str = TEXT, fmt: str = "pcm", seed: int | None = 5) -> dict[str, Any]:
    """Type, pick, press play; returns the page's figures once the run played to its end or failed."""
    page.fill("#text", text)
    page.select_option("#format", fmt)
    page.fill("#seed", "" if seed is None else str(seed))
    page.click("#play")
    page.wait_for_function(
        "(() => { const last = window.turbottsPlayground.last; return last && (last.isFinished || last.error); })()",
        timeout=WAIT_MS,
    )
    last: dict[str, Any] = page.evaluate("window.turbottsPlayground.last")
    return last


def test_the_page_and_everything_it_loads_come_from_the_server(server_url: str) -> None:
    page = httpx.get(f"{server_url}/", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    tags = re.findall(r'<(?:script|link)[^>]* (?:src|href)="([^"]+)"', page.text)
    assets = [url for url in tags if not url.startswith("data:")]
    assert sorted(assets) == ["static/playground.css", "static/playground.js"]
    modules = ["static/playground.js"]
    for module in modules:  # the ES modules it imports, transitively
        source = httpx.get(f"{server_url}/{module}", timeout=30)
        assert source.status_code == 200 and "javascript" in source.headers["content-type"]
        modules += [f"static/{name}" for name in re.findall(r'from "\./([\w.]+)"', source.text)]
    assert sorted(set(modules)) == ["static/api.js", "static/players.js", "static/playground.js"]
    for path in ["", *modules, "static/playground.css"]:
        text = httpx.get(f"{server_url}/{path}", timeout=30).text
        assert not re.search(r"(https?:)?//[\w.-]+\.\w+/", text), f"{path or '/'} loads something from elsewhere"
    assert "/" not in httpx.get(f"{server_url}/openapi.json", timeout=30).json()["paths"]


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "aac", "opus", "flac"])
def test_play_streams_audio_that_the_browser_plays(page: Any, fmt: str) -> None:
    last = _play(page, fmt=fmt)
    assert last["error"] is None
    assert last["receivedS"] > 0.1
    assert last["playedS"] >= 0.9 * last["receivedS"], "the playback clock ran through the audio"
    assert last["peakLevel"] > 0.001, "decoded samples reached the audio graph"
    assert last["ttfaMs"] > 0 and last["rtf"] > 0
    assert page.text_content("#ttfa").endswith(" ms")
    assert page.text_content("#status") == "done"
    assert page.is_hidden("#error")


def test_pcm_playback_starts_with_the_first_chunk(page: Any) -> None:
    """Web Audio schedules the first chunk as it arrives; opus waits for the whole response."""
    text = " ".join(["Streaming starts with the first chunk."] * 6)
    streamed = _play(page, text=text, fmt="pcm")
    assert streamed["numChunks"] > 1
    assert 0 < streamed["startedWithS"] < streamed["receivedS"]
    whole = _play(page, text=text, fmt="opus")
    assert whole["startedWithS"] == whole["receivedS"] > 0


def test_stop_ends_the_run_and_the_next_play_works(page: Any) -> None:
    page.fill("#text", " ".join(["Stop me while I am still talking."] * 8))
    page.fill("#seed", "5")
    page.click("#play")
    page.wait_for_function("window.turbottsPlayground.last.ttfaMs !== null", timeout=WAIT_MS)
    page.click("#stop")
    assert page.text_content("#status") == "stopped"
    assert page.is_disabled("#stop")
    assert page.evaluate("window.turbottsPlayground.last.isFinished") is False
    assert page.is_hidden("#error")
    assert _play(page)["error"] is None


def test_download_is_the_audio_that_was_played(page: Any, server_url: str) -> None:
    last = _play(page, fmt="wav", seed=11)
    assert last["error"] is None
    assert page.get_attribute("#download", "download") == "turbotts.wav"
    with page.expect_download() as download_info:
        page.click("#download")
    downloaded = Path(download_info.value.path()).read_bytes()
    samples, rate_hz = sf.read(io.BytesIO(downloaded), dtype="int16")
    direct = httpx.post(
        f"{server_url}{SPEECH}", json={"input": TEXT, "seed": 11, "response_format": "pcm"}, timeout=120
    )
    assert rate_hz == 24000
    assert samples.tobytes() == direct.content
    assert abs(samples.size / rate_hz - last["receivedS"]) < 1e-3


def test_empty_text_shows_the_servers_error(page: Any) -> None:
    last = _play(page, text="   ")
    assert last["errorStatus"] == 400
    message = page.text_content("#error")
    assert page.is_visible("#error")
    assert message.startswith("400 invalid_input: ") and "nothing to say" in message
    assert last["receivedS"] == 0 and last["ttfaMs"] is None


def test_a_validation_error_names_the_field(page: Any) -> None:
    page.eval_on_selector("#speed", "el => { el.min = '0'; el.value = '0.1'; }")  # below the API's 0.25
    last = _play(page)
    assert last["errorStatus"] == 422
    assert "speed" in page.text_content("#error")


def test_rate_limited_request_shows_429_and_when_to_retry(browser: Any, tmp_path: Path) -> None:
    with running_server(tmp_path, rate_limit_rps=0.01, rate_limit_burst=1) as (url, _):
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"{url}/")  # listing the voices takes the one request the bucket holds
        page.wait_for_function("window.turbottsPlayground.voicesLoaded")
        last = _play(page)
        context.close()
    assert last["errorStatus"] == 429
    assert re.match(r"429 rate_limit_exceeded: .+ \(retry in \d+ s\)$", last["error"]), last["error"]


def test_an_overloaded_server_shows_503_and_when_to_retry(browser: Any, tmp_path: Path) -> None:
    # any resident memory is over a 1-byte limit: admission refuses every stream
    with running_server(tmp_path, admission_max_rss_bytes=1, admission_window_s=0.0) as (url, _):
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"{url}/")
        page.wait_for_function("window.turbottsPlayground.voicesLoaded")
        last = _play(page)
        context.close()
    assert last["errorStatus"] == 503
    assert re.match(r"503 overloaded: .+ \(retry in \d+ s\)$", last["error"]), last["error"]
    assert last["receivedS"] == 0


def test_a_server_with_api_keys_says_401_until_the_key_is_given(browser: Any, tmp_path: Path) -> None:
    with running_server(tmp_path, api_keys="sk-playground") as (url, _):
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"{url}/")
        page.wait_for_selector("#error:not([hidden])", timeout=WAIT_MS)
        assert page.text_content("#error").startswith("401 invalid_api_key: ")
        page.fill("#api-key", "sk-playground")
        page.dispatch_event("#api-key", "change")
        page.wait_for_function("window.turbottsPlayground.voicesLoaded", timeout=WAIT_MS)
        assert page.is_hidden("#error")
        last = _play(page)
        stored = page.evaluate("localStorage.getItem('turbotts.apiKey')")
        context.close()
    assert last["error"] is None and last["peakLevel"] > 0.001
    assert stored == "sk-playground"


def test_builtin_and_saved_voices_are_listed_and_usable(page: Any, server_url: str) -> None:
    created = httpx.post(f"{server_url}/v1/voices", json={"name": "narrator", "seed": 42}, timeout=30)
    assert created.status_code == 201
    page.reload()
    page.wait_for_function("window.turbottsPlayground.voicesLoaded")
    builtins = page.eval_on_selector_all("#voice optgroup[label='Built-in'] option", "els => els.map(e => e.value)")
    saved = page.eval_on_selector_all("#voice optgroup[label='Saved'] option", "els => els.map(e => e.value)")
    assert "alloy" in builtins and "narrator" not in builtins
    assert "narrator" in saved
    page.select_option("#voice", "narrator")
    assert _play(page)["error"] is None


def test_unknown_voice_shows_404(page: Any) -> None:
    page.eval_on_selector("#voice", "el => el.append(new Option('nobody', 'nobody'))")
    page.select_option("#voice", "nobody")
    last = _play(page)
    assert last["errorStatus"] == 404
    assert page.text_content("#error").startswith("404 voice_not_found: ")


def _under_prefix(app: Any) -> Any:
    """The app behind a path prefix, the way Ray Serve mounts a route prefix (ASGI ``root_path``)."""

    async def prefixed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            if not scope["path"].startswith(f"{PREFIX}/"):
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b"outside the prefix"})
                return
            scope = {**scope, "root_path": PREFIX}
        await app(scope, receive, send)

    return prefixed


def test_the_page_works_behind_a_path_prefix(browser: Any, tmp_path: Path) -> None:
    with running_server(tmp_path, wrap=_under_prefix, max_new_tokens=20) as (url, _):
        assert httpx.get(f"{url}/", timeout=30).status_code == 404
        context = browser.new_context()
        page = context.new_page()
        paths: list[str] = []
        page.on("request", lambda request: paths.append(request.url.removeprefix(url)))
        page.goto(f"{url}{PREFIX}/")
        page.wait_for_function("window.turbottsPlayground && window.turbottsPlayground.voicesLoaded")
        last = _play(page)
        context.close()
    assert last["error"] is None and last["peakLevel"] > 0.001
    assert all(path.startswith(f"{PREFIX}/") for path in paths if not path.startswith(("blob:", "data:"))), paths
    assert f"{PREFIX}/v1/audio/speech" in paths


def test_captions_appear_and_follow_the_playback(page: Any) -> None:
    page.fill("#text", TEXT)
    page.select_option("#format", "pcm")
    page.click("#play")
    page.wait_for_selector("#captions .caption.active", timeout=WAIT_MS)
    active = page.evaluate("window.turbottsPlayground.last")
    assert active["activeCaption"] is not None
    page.wait_for_function("window.turbottsPlayground.last.isFinished", timeout=WAIT_MS)
    captions = page.eval_on_selector_all(
        "#captions .caption", "els => els.map(e => [e.textContent, Number(e.dataset.start), Number(e.dataset.end)])"
    )
    assert len(captions) == NUM_SENTENCES
    assert " ".join(text for text, _, _ in captions).split() == TEXT.split()
    assert all(start < end for _, start, end in captions)
    assert page.locator("#captions .caption.spoken").count() == NUM_SENTENCES
    assert page.locator("#captions .caption.active").count() == 0


def _reference_clip(server_url: str) -> bytes:
    """A WAV clip the server itself synthesized, repeated to two seconds (clips must last 1 to 30 s)."""
    response = httpx.post(
        f"{server_url}{SPEECH}", json={"input": "A reference clip.", "seed": 3, "response_format": "pcm"}, timeout=120
    )
    samples = np.frombuffer(response.content, dtype="<i2")
    assert samples.size > 0
    buffer = io.BytesIO()
    sf.write(buffer, np.tile(samples, -(-2 * 24000 // samples.size)), 24000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def test_a_reference_clip_uploads_and_its_voice_is_selectable(page: Any, server_url: str) -> None:
    page.click("#clone summary")
    page.fill("#voice-name", "my-clip")
    page.fill("#voice-transcript", "A reference clip.")
    page.set_input_files(
        "#voice-audio", {"name": "reference.wav", "mimeType": "audio/wav", "buffer": _reference_clip(server_url)}
    )
    page.click("#upload-button")
    page.wait_for_function("document.getElementById('voice').value === 'my-clip'", timeout=WAIT_MS)
    assert page.text_content("#upload-status") == 'added voice "my-clip"'
    saved = page.eval_on_selector_all("#voice optgroup[label='Saved'] option", "els => els.map(e => e.value)")
    assert "my-clip" in saved
    listed = httpx.get(f"{server_url}/v1/voices", timeout=30).json()["data"]
    assert "my-clip" in [voice["name"] for voice in listed]
    assert _play(page)["error"] is None


def test_a_bad_clip_upload_shows_the_servers_error(page: Any) -> None:
    page.click("#clone summary")
    page.fill("#voice-name", "not-audio")
    page.set_input_files("#voice-audio", {"name": "notes.wav", "mimeType": "audio/wav", "buffer": b"not audio"})
    page.click("#upload-button")
    page.wait_for_selector("#error:not([hidden])", timeout=WAIT_MS)
    assert re.match(r"4\d\d ", page.text_content("#error"))
    assert page.text_content("#upload-status") == "upload failed"


def test_screenshot(page: Any, tmp_path: Path) -> None:
    """The picture on docs/http/playground.md, from this setup: ``TURBOTTS_PLAYGROUND_SCREENSHOT=docs/playground.png``.

    Taken while a caption is highlighted (or, on a server without captions, once playback ends).
    """
    page.fill("#text", TEXT)
    page.select_option("#format", "pcm")
    page.fill("#seed", "5")
    page.click("#play")
    page.wait_for_function(
        "window.turbottsPlayground.last.isFinished || document.querySelector('#captions .caption.active')",
        timeout=WAIT_MS,
    )
    page.wait_for_function("window.turbottsPlayground.last.ttfaMs !== null", timeout=WAIT_MS)
    target = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "playground.png")
    page.screenshot(path=str(target), full_page=True)
    page.wait_for_function("window.turbottsPlayground.last.isFinished", timeout=WAIT_MS)
    assert page.evaluate("window.turbottsPlayground.last.error") is None
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
