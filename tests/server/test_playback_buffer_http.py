"""A request's ``playback_buffer_s`` sets its stream's deadlines in the engine, through a real server.

The engine's ``add_request`` is wrapped (the real one still runs) to keep the playback clock each
request gets: the buffer the request names, else the server's ``playback_buffer_s`` setting, and
no clock at all for a buffered format (no listener plays it as it comes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.conftest import running_server
from turbotts.engine.deadline import PlaybackClock

SETTING_S = 2.5  # the server's own default here, so that "the setting" and "the request's" differ


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    with running_server(tmp_path_factory.mktemp("buffer"), playback_buffer_s=SETTING_S, cache_max_bytes=0) as (
        url,
        server,
    ):
        yield url, server.config.app.state.engine.core


@pytest.fixture()
def clocks(served: tuple[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[PlaybackClock | None]:
    """The playback clock of each engine request made while the test runs."""
    core, seen = served[1], []
    add_request = core.add_request

    def recording(*args: Any, **kwargs: Any) -> Any:
        request = add_request(*args, **kwargs)
        seen.append(request.sequence.playback)
        return request

    monkeypatch.setattr(core, "add_request", recording)
    return seen


def _speak(url: str, **extra: Any) -> None:
    body = {"input": "Buffer test.", "max_new_tokens": 4, **extra}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200, response.text


def test_the_requests_buffer_sets_its_clock(served: tuple[str, Any], clocks: list[PlaybackClock | None]) -> None:
    _speak(served[0], response_format="pcm", playback_buffer_s=7.5)
    assert [clock.buffer_s if clock else None for clock in clocks] == [7.5]


def test_without_one_the_setting_does(served: tuple[str, Any], clocks: list[PlaybackClock | None]) -> None:
    _speak(served[0], response_format="pcm")
    assert [clock.buffer_s if clock else None for clock in clocks] == [SETTING_S]


def test_a_buffered_format_has_no_listener_clock(served: tuple[str, Any], clocks: list[PlaybackClock | None]) -> None:
    _speak(served[0], response_format="flac", playback_buffer_s=7.5)
    assert clocks == [None]


def test_out_of_range_is_a_422_naming_the_field(served: tuple[str, Any]) -> None:
    response = httpx.post(f"{served[0]}/v1/audio/speech", json={"input": "x", "playback_buffer_s": 31.0}, timeout=60)
    assert response.status_code == 422 and "playback_buffer_s" in response.text
