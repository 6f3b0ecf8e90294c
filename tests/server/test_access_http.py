"""Rate limits (local and shared through Redis), API keys and the blocklist, over real HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest_redis import RedisServer
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH, metric


def _check_429(response: httpx.Response) -> None:
    assert response.status_code == 429
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"


def test_rate_limit_per_client_with_retry_after(tmp_path: Path) -> None:
    with running_server(tmp_path, rate_limit_rps=0.5, rate_limit_burst=3) as (url, _):
        statuses = [httpx.get(f"{url}/v1/voices").status_code for _ in range(3)]
        assert statuses == [200, 200, 200]
        _check_429(httpx.get(f"{url}/v1/voices"))
        _check_429(httpx.post(f"{url}{SPEECH}", json={"input": "Hi there."}))
        assert httpx.get(f"{url}/healthz").status_code == 200  # operations stay open
        assert metric(url, "turbotts_rate_limited_total", 'scope="ip"') == 2


def test_redis_buckets_hold_across_two_replicas(tmp_path: Path, redis_server: RedisServer) -> None:
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    limits = {"rate_limit_rps": 0.2, "rate_limit_burst": 4, "redis_url": redis_server.url}
    with (
        running_server(tmp_path / "a", **limits) as (url_a, _),
        running_server(tmp_path / "b", **limits) as (
            url_b,
            _,
        ),
    ):
        statuses = [httpx.get(f"{url}/v1/voices").status_code for url in [url_a, url_b] * 4]
    # one shared bucket of 4: each replica alone would have allowed all 4 of its requests
    assert statuses == [200, 200, 200, 200, 429, 429, 429, 429]


def test_api_keys_from_file_and_env_hashed_401_shape(tmp_path: Path) -> None:
    key_file = tmp_path / "keys.txt"
    key_file.write_text("# operators\nsk-file-key-1\n")
    with running_server(tmp_path, api_key_file=key_file, api_keys="sk-env-key-2") as (url, server):
        store = server.config.app.state.api_keys
        assert "sk-file-key-1" not in repr(vars(store)) and store.num_keys == 2  # only hashes are kept
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic sk-file-key-1"}):
            response = httpx.get(f"{url}/v1/voices", headers=headers)
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["type"] == "authentication_error"
            assert response.json()["error"]["code"] == "invalid_api_key"
        for key in ("sk-file-key-1", "sk-env-key-2"):
            assert httpx.get(f"{url}/v1/voices", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        for path in ("/healthz", "/readyz", "/metrics"):
            assert httpx.get(f"{url}{path}").status_code == 200


EVASIONS = [
    "say forbiddenword now",
    "say FORBIDDENWORD now",
    "say f o r b i d d e n w o r d now",
    "say f.o.r.b.i.d.d.e.n.w.o.r.d now",
    "say f\u200borbidden\u200bword now",  # zero-width spaces
    "say \uff46\uff4f\uff52\uff42\uff49\uff44\uff44\uff45\uff4e\uff57\uff4f\uff52\uff44 now",  # full width
    "say f0rb1ddenw0rd now",  # leetspeak
]


def test_blocklist_evasions_and_reload_without_restart(tmp_path: Path) -> None:
    blocklist = tmp_path / "blocklist.txt"
    blocklist.write_text("# terms\nforbiddenword\n")
    key = {"Authorization": "Bearer sk-admin"}
    with (
        running_server(tmp_path, blocklist=blocklist, api_keys="sk-admin") as (url, _),
        httpx.Client(base_url=url, headers=key, timeout=120) as http,
    ):
        for text in EVASIONS:
            response = http.post(SPEECH, json={"input": text, "max_new_tokens": 4})
            assert response.status_code == 400, text
            assert response.json()["error"]["code"] == "content_filtered"
        ok = {"input": "A perfectly harmless sentence about newcomers.", "response_format": "pcm", "max_new_tokens": 4}
        assert http.post(SPEECH, json=ok).status_code == 200
        assert metric(url, "turbotts_content_filtered_total") == len(EVASIONS)

        blocklist.write_text("forbiddenword\nnewcomers\n")
        assert httpx.post(f"{url}/admin/reload-blocklist").status_code == 401  # admin needs a key
        reloaded = http.post("/admin/reload-blocklist")
        assert reloaded.status_code == 200 and reloaded.json() == {"status": "reloaded"}
        blocked = http.post(SPEECH, json=ok)
        assert blocked.status_code == 400 and blocked.json()["error"]["code"] == "content_filtered"


def test_reload_without_a_blocklist_says_how_to_configure_one(http: httpx.Client) -> None:
    response = http.post("/admin/reload-blocklist")
    assert response.status_code == 400 and "--blocklist" in response.json()["error"]["message"]


@pytest.mark.parametrize("text", ["classic glass", "assessment"])
def test_blocklist_matches_whole_words_only(tmp_path: Path, text: str) -> None:
    blocklist = tmp_path / "b.txt"
    blocklist.write_text("ass\n")
    with running_server(tmp_path, blocklist=blocklist) as (url, _):
        body = {"input": text, "response_format": "pcm", "max_new_tokens": 4}
        assert httpx.post(f"{url}{SPEECH}", json=body, timeout=120).status_code == 200
