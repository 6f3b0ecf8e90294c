"""TurboTTS on Ray Serve: 2 tiny-model replicas behind the proxy, real HTTP, real Redis, real decoders.

One deployment for the module (see conftest). The order matters: the tests
that kill a replica wait until Ray has replaced it, and the last three redeploy
the application or delete it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
import websockets
from openai import AsyncOpenAI, OpenAI

from tests.ray.conftest import MAX_NEW_TOKENS, wait_ready
from tests.server.audio import EXPECTED_RATE_HZ, decode

SPEECH = "/v1/audio/speech"
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
LONG_TEXT = " ".join(f"Sentence number {i} of a long text that streams." for i in range(24))
#: about 60 segments: a second of synthesis or more, whose answer (flac) starts only when synthesis ends
RETRIED_TEXT = " ".join(f"Sentence {i} of a text whose replica dies before it answers." for i in range(60))


@pytest.fixture()
def http(ray_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=ray_url, timeout=120) as client:
        yield client


def _speech(http: httpx.Client, text: str, **fields: object) -> httpx.Response:
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm", **fields}
    response = http.post(SPEECH, json=body)
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("fmt", FORMATS)
def test_openai_client_gets_audio_in_every_format(ray_url: str, fmt: str) -> None:
    with (
        OpenAI(base_url=f"{ray_url}/v1", api_key="x", timeout=120, max_retries=0) as client,
        client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="Hello there, world.", response_format=fmt,  # type: ignore[arg-type]
            extra_body={"seed": 7, "max_new_tokens": MAX_NEW_TOKENS},
        ) as response,
    ):  # fmt: skip
        assert response.headers["x-replica"]
        data = b"".join(response.iter_bytes())
    rate, samples = decode(data, fmt)
    assert rate == EXPECTED_RATE_HZ[fmt] and samples.size > 0 and np.isfinite(samples).all()


def test_sse_events_through_the_proxy(http: httpx.Client) -> None:
    body = {"input": "Hello there. Streamed as events.", "stream_format": "sse", "seed": 3}
    with http.stream("POST", SPEECH, json=body) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and "speech.audio.delta" in kinds, kinds


def test_websocket_session_through_the_proxy(ray_url: str) -> None:
    async def main() -> tuple[bytes, dict[str, object]]:
        async with websockets.connect(ray_url.replace("http://", "ws://") + "/v1/audio/speech/ws") as ws:
            await ws.send(json.dumps({"type": "config", "voice": "sage", "response_format": "pcm", "seed": 2}))
            for piece in ["Hello th", "ere. How are", " you today?", " Bye"]:
                await ws.send(json.dumps({"type": "text", "text": piece}))
            await ws.send(json.dumps({"type": "end"}))
            audio = bytearray()
            while isinstance(message := await ws.recv(), bytes):
                audio += message
            return bytes(audio), json.loads(message)

    audio, done = asyncio.run(main())
    assert done["type"] == "done", done
    assert len(audio) > 0 and len(audio) % 2 == 0


def test_sixteen_concurrent_streams_all_complete_on_both_replicas(ray_url: str) -> None:
    async def one(client: AsyncOpenAI, index: int) -> tuple[str, bytes]:
        async with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="shimmer", input=f"Request number {index}. It streams.", response_format="wav",
        ) as response:  # fmt: skip
            return response.headers["x-replica"], b"".join([chunk async for chunk in response.iter_bytes()])

    async def main() -> list[tuple[str, bytes]]:
        async with AsyncOpenAI(base_url=f"{ray_url}/v1", api_key="x", timeout=120, max_retries=0) as client:
            return await asyncio.gather(*(one(client, i) for i in range(16)))

    results = asyncio.run(main())
    for _, body in results:
        rate, samples = decode(body, "wav")
        assert rate == 24000 and samples.size > 0
    assert len({replica for replica, _ in results}) == 2  # unseeded: the least-loaded replica each time


def test_find_capacity_runs_its_levels_through_the_proxy(ray_url: str) -> None:
    """``turbotts loadtest --find-capacity`` against the Serve route: levels 1 and 2 with decoded audio."""
    from turbotts.bench.loadtest_capacity import CapacityCriteria, CapacityPlan, find_capacity
    from turbotts.bench.loadtest_client import LoadOptions, speech_url

    criteria = CapacityCriteria(min_continuity=0.0, max_ttfa_p95_s=60.0)  # the route is judged, not the speed
    plan = CapacityPlan(("Capacity through the proxy.", "今天天气很好。"), criteria, max_concurrency=2,
                        level_duration_s=0.0, min_requests_per_listener=2)  # fmt: skip
    search = find_capacity(LoadOptions(url=speech_url(ray_url), prebuffer_s=0.5), plan)
    assert [level["concurrency"] for level in search.levels] == [1, 2]
    assert [level["num_requests"] for level in search.levels] == [2, 4]
    assert all(level["num_ok"] >= 1 and level["audio_s"] > 0 for level in search.levels), search.levels
    assert search.capacity >= 1


def test_first_bytes_arrive_before_synthesis_ends(http: httpx.Client) -> None:
    """Closing a long stream after its first chunk leaves most of its segments never synthesized."""
    num_segments = len(re.findall(r"\.", LONG_TEXT))
    before = _engine_requests(_settle(http))  # every replica has posted what earlier tests sent
    with http.stream("POST", SPEECH, json={"input": LONG_TEXT, "response_format": "pcm"}) as response:
        assert response.status_code == 200
        assert next(response.iter_bytes())
    assert _engine_requests(_settle(http)) - before < num_segments / 2


def test_the_same_seeded_request_lands_on_one_replica_and_hits_its_l1(http: httpx.Client) -> None:
    responses = [_speech(http, "Affinity keeps this on one replica.", seed=11) for _ in range(20)]
    assert len({r.headers["x-replica"] for r in responses}) == 1
    assert [r.headers["x-cache"] for r in responses[1:]] == ["l1"] * 19


def test_distinct_seeded_requests_spread_over_both_replicas(http: httpx.Client) -> None:
    replicas = Counter(_speech(http, f"Distinct text number {i}.", seed=5).headers["x-replica"] for i in range(20))
    assert len(replicas) == 2, replicas


def test_affinity_yields_to_the_idle_replica_when_its_replica_is_saturated(ray_url: str, http: httpx.Client) -> None:
    """Same first segment (same key), long distinct tails: the preferred replica fills, then the other takes over."""
    probe = {"input": f"Saturate this replica. {LONG_TEXT} Probe.", "seed": 21, "response_format": "pcm"}
    with http.stream("POST", SPEECH, json=probe) as response:  # closed at once: only its replica matters
        preferred = response.headers["x-replica"]

    async def one(client: httpx.AsyncClient, index: int) -> str:
        # 50 ms apart: the router sees queue lengths the replicas report as they accept; a burst sent in one instant
        # is routed before any report arrives (on an idle box all 12 then went to the preferred replica)
        await asyncio.sleep(0.05 * index)
        body = {"input": f"Saturate this replica. {LONG_TEXT} Tail {index}.", "seed": 21, "response_format": "pcm"}
        async with client.stream("POST", SPEECH, json=body) as response:
            assert response.status_code == 200
            async for _ in response.aiter_bytes():
                pass
            return response.headers["x-replica"]

    async def main() -> list[str]:
        async with httpx.AsyncClient(base_url=ray_url, timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(12)))

    landed = Counter(asyncio.run(main()))
    assert len(landed) == 2, landed  # the threshold (4) was crossed: some went to the idle replica
    assert landed[preferred] > 12 / 2, landed  # but affinity held while the lead was small


def test_a_voice_created_through_the_endpoint_is_used_by_both_replicas(http: httpx.Client) -> None:
    created = http.post("/v1/voices", json={"name": "shared-voice", "seed": 4242})
    assert created.status_code == 201, created.text
    replicas = Counter(
        _speech(http, f"Shared voice sentence {i}.", voice="shared-voice", seed=1).headers["x-replica"]
        for i in range(12)
    )
    assert len(replicas) == 2, replicas
    names = {
        v["name"]
        for _ in range(6)
        for v in http.get("/v1/voices").json()["data"]
    }  # fmt: skip
    assert "shared-voice" in names


def test_metrics_of_every_replica_are_reachable_with_a_replica_label(http: httpx.Client) -> None:
    text = _settle(http)
    replicas = set(re.findall(r'turbotts_audio_seconds_total\{replica="([^"]+)"\}', text))
    assert len(replicas) == 2, text[:2000]
    for family in ("turbotts_time_to_first_audio_seconds_count", "turbotts_queue_depth", "turbotts_cache_lookups"):
        assert len(set(re.findall(rf'{family}\w*{{replica="([^"]+)"', text))) == 2, family


def test_the_deployed_replicas_run_with_the_options_their_settings_map_to(ray_url: str, redis_url: str) -> None:
    """What the controller runs is what :func:`build_application` makes of the settings (the count, the router...)."""
    from tests.ray.conftest import deployment_options, tiny_settings
    from turbotts.scaleout.launch import build_application

    settings = tiny_settings(redis_url, int(ray_url.rsplit(":", 1)[1]))
    expected = deployment_options(build_application(settings))
    deployed = _replica_deployment()
    config = deployed.deployment_config.model_dump()
    assert _restricted(config, expected["TTSReplica"]) == expected["TTSReplica"]
    assert config["num_replicas"] == 2 and config["max_ongoing_requests"] == settings.max_batch_size
    assert config["request_router_config"]["request_router_class"] == "turbotts.scaleout.router.CacheAffinityRouter"
    assert len(deployed.replicas) == 2


def test_a_replica_that_dies_before_answering_is_retried_on_another(ray_url: str, http: httpx.Client) -> None:
    """The routing key pins the request to one replica; it is killed once it has taken the request, before it
    answered (``flac`` answers only when synthesis ends): the client still gets its audio, from the other replica."""
    body = {"model": "tts-1", "input": RETRIED_TEXT, "voice": "alloy", "seed": 31}
    with http.stream("POST", SPEECH, json={**body, "response_format": "pcm"}) as response:  # closed at once
        doomed = response.headers["x-replica"]  # where this key goes
    replica = _replica_actor(doomed)

    async def until_ongoing(is_done: Callable[[int], bool]) -> None:
        """Until the doomed replica's count of requests (what Ray's router asks a replica) satisfies ``is_done``."""
        while not is_done(await replica.get_num_ongoing_requests.remote()):
            await asyncio.sleep(0.005)

    async def main() -> httpx.Response:
        await asyncio.wait_for(until_ongoing(lambda n: n == 0), 60)  # the closed probe's request ended
        async with httpx.AsyncClient(base_url=ray_url, timeout=120) as client:
            answer = asyncio.create_task(client.post(SPEECH, json={**body, "response_format": "flac"}))
            await asyncio.wait_for(until_ongoing(lambda n: n > 0), 60)  # it took the request
            assert not answer.done(), "the request ended before its replica was killed: make its text longer"
            _kill_replica(doomed)
            return await answer

    response = asyncio.run(main())
    assert response.status_code == 200, response.text
    assert response.headers["x-replica"] != doomed
    rate, samples = decode(response.content, "flac")
    assert rate == 24000 and samples.size > 0 and np.isfinite(samples).all()
    wait_ready(ray_url, 2)  # Ray restarted the replica


def test_a_replica_dying_mid_session_sends_an_error_and_closes_1011(ray_url: str) -> None:
    """The session's replica is killed while the client holds the session open: an error message, then 1011."""

    async def main() -> tuple[list[str | bytes], int | None]:
        session = _Session(ray_url, seed=60)
        await session.start()  # the replica accepted and sent the first sentence's audio
        _kill_replica(session.replica)
        received: list[str | bytes] = []
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            while True:
                received.append(await session.ws.recv())
        return received, closed.value.rcvd.code if closed.value.rcvd else None

    received, code = asyncio.run(main())
    texts = [json.loads(message) for message in received if isinstance(message, str)]
    assert [text["type"] for text in texts] == ["error"], texts
    assert "replica" in texts[0]["error"]["message"], texts  # it says what happened
    assert code == 1011
    wait_ready(ray_url, 2)


def test_killing_a_replica_mid_stream_ends_its_streams_and_the_next_requests_succeed(
    ray_url: str, http: httpx.Client
) -> None:
    outcomes: list[str] = []

    async def one(client: httpx.AsyncClient, started: asyncio.Event) -> None:
        body = {"input": LONG_TEXT * 2, "stream_format": "sse"}
        try:
            async with client.stream("POST", SPEECH, json=body) as response:
                last = ""
                async for line in response.aiter_lines():
                    started.set()
                    last = line or last
            outcomes.append("error" if '"error"' in last else "done" if "speech.audio.done" in last else "cut")
        except httpx.TransportError:
            outcomes.append("cut")

    async def main() -> None:
        async with httpx.AsyncClient(base_url=ray_url, timeout=httpx.Timeout(60)) as client:
            events = [asyncio.Event() for _ in range(6)]
            tasks = [asyncio.create_task(one(client, event)) for event in events]
            await asyncio.gather(*(event.wait() for event in events))
            _kill_one_replica()
            await asyncio.wait_for(asyncio.gather(*tasks), 120)  # none hangs

    asyncio.run(main())
    assert len(outcomes) == 6 and {"error", "cut"} & set(outcomes), outcomes
    statuses = [http.post(SPEECH, json={"input": f"After the kill {i}.", "seed": i}).status_code for i in range(20)]
    assert statuses == [200] * 20
    wait_ready(str(http.base_url).rstrip("/"), 2)  # Ray restarted the replica


def _kill_one_replica() -> None:
    title = "ServeReplica:turbotts:TTSReplica"  # Ray's process title for a replica of this deployment
    ours = psutil.Process().children(recursive=True)  # this test's cluster: other sessions may run Ray too
    victims = [p for p in ours if title in " ".join(_cmdline(p))]
    assert victims, "no replica process found"
    victims[0].kill()


def _restricted(actual: Any, expected: Any) -> Any:
    """``actual`` cut down to the keys ``expected`` has, at every depth (the controller adds Ray's defaults)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {key: _restricted(actual.get(key), value) for key, value in expected.items()}
    return actual


def _replica_deployment() -> Any:
    """The controller's view of the replica deployment: its options and its replicas (id, state, pid, actor).

    What Ray's dashboard shows (``serve.status()`` has neither the options nor the replicas' processes).
    """
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeInstanceDetails

    from turbotts.scaleout.launch import APP_NAME

    details = ServeInstanceDetails(**_get_global_client().get_serve_details())
    return details.applications[APP_NAME].deployments["TTSReplica"]


def _replica_actor(replica: str) -> Any:
    """The Ray actor of ``replica`` (an ``X-Replica`` value): it answers what Ray's router asks it."""
    import ray
    from ray.serve._private.constants import SERVE_NAMESPACE

    names = {details.replica_id: details.actor_name for details in _replica_deployment().replicas}
    return ray.get_actor(names[replica], namespace=SERVE_NAMESPACE)


def _kill_replica(replica: str) -> None:
    """SIGKILL the process of ``replica`` (an ``X-Replica`` value): a crash, not a stop Ray asked for."""
    pids = {details.replica_id: details.pid for details in _replica_deployment().replicas}
    psutil.Process(pids[replica]).kill()


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # it exited since it was listed
        return []


def _engine_requests(text: str) -> float:
    return sum(float(v) for v in re.findall(r"^turbotts_engine_requests_total\{[^}]*\} (\S+)$", text, re.M))


def _settle(http: httpx.Client) -> str:
    """/metrics once every replica has posted again (each posts every REPORT_PERIOD_S)."""
    from turbotts.scaleout.fleet_metrics import REPORT_PERIOD_S

    time.sleep(2.5 * REPORT_PERIOD_S)
    return http.get("/metrics").text


def test_a_redeploy_drains_in_flight_streams_and_new_replicas_take_over(
    ray_url: str, redis_url: str, http: httpx.Client
) -> None:
    """``serve.run`` with a changed config replaces every replica; sessions open on a stopping one finish whole.

    WebSocket sessions stay open as long as the client holds them, so the test
    holds one on each old replica until Ray reports a replica STOPPING, then
    sends the rest of the text. Each session is seeded: the same session after
    the redeploy (new replicas) is its uninterrupted length.
    """
    from ray import serve

    from tests.ray.conftest import tiny_settings
    from turbotts.scaleout.launch import APP_NAME, build_application

    before = {http.get("/readyz").headers["x-replica"] for _ in range(20)}
    changed = tiny_settings(redis_url, int(ray_url.rsplit(":", 1)[1]), shutdown_grace_s=25.0)  # a new config

    async def main() -> tuple[list[tuple[str, bytes, str]], list[int]]:
        sessions = [_Session(ray_url, seed=40 + i) for i in range(4)]
        for session in sessions:  # one after another: each goes to the replica with fewer sessions
            await session.start()
        run = functools.partial(serve.run, build_application(changed), name=APP_NAME, route_prefix="/")
        deploying = asyncio.create_task(asyncio.to_thread(run))
        await asyncio.wait_for(_until_a_replica_is_stopping(APP_NAME), 120)
        ended = await asyncio.gather(*(session.finish() for session in sessions))
        async with httpx.AsyncClient(base_url=ray_url, timeout=httpx.Timeout(120)) as client:
            statuses: list[int] = []
            while not statuses or not deploying.done():  # requests while the rollout goes on
                response = await client.post(SPEECH, json={"input": f"During the redeploy {len(statuses)}."})
                statuses.append(response.status_code)
        await deploying
        return ended, statuses

    ended, during = asyncio.run(main())
    assert {replica for replica, _, _ in ended} == before  # a session was open on the replica that stopped first
    assert [done for _, _, done in ended] == ["done"] * 4, ended
    assert during == [200] * len(during)
    wait_ready(ray_url, 2)

    async def again() -> list[tuple[str, bytes, str]]:
        sessions = [_Session(ray_url, seed=40 + i) for i in range(4)]
        for session in sessions:
            await session.start()
        return await asyncio.gather(*(session.finish() for session in sessions))

    after = asyncio.run(again())
    assert not {replica for replica, _, _ in after} & before  # new replicas serve now
    for (_, audio, _), (_, reference, done) in zip(ended, after, strict=True):
        _, samples = decode(audio, "pcm")
        assert done == "done" and samples.size > 0 and np.isfinite(samples).all()
        assert len(audio) == len(reference)  # every drained session got all its audio


class _Session:
    """A seeded WebSocket session held open after its first sentence's audio, until ``finish``."""

    def __init__(self, url: str, seed: int) -> None:
        self._url = url.replace("http://", "ws://") + "/v1/audio/speech/ws"
        self._seed = seed
        self._audio = bytearray()

    @property
    def ws(self) -> Any:
        return self._ws

    @property
    def replica(self) -> str:
        """The replica serving the session (its ``X-Replica``)."""
        return str(self._ws.response.headers["x-replica"])

    async def start(self) -> None:
        self._ws = await websockets.connect(self._url)
        config = {"type": "config", "voice": "alloy", "response_format": "pcm", "seed": self._seed}
        await self._ws.send(json.dumps(config))
        await self._ws.send(json.dumps({"type": "text", "text": f"Held session {self._seed} begins here. "}))
        message = await self._ws.recv()
        assert isinstance(message, bytes), message
        self._audio += message

    async def finish(self) -> tuple[str, bytes, str]:
        """The rest of the text, then every frame up to the final message: (replica, audio, final type)."""
        rest = " ".join(f"Then sentence {j} of session {self._seed}." for j in range(4))
        await self._ws.send(json.dumps({"type": "text", "text": rest}))
        await self._ws.send(json.dumps({"type": "end"}))
        while isinstance(message := await self._ws.recv(), bytes):
            self._audio += message
        await self._ws.close()
        return self._ws.response.headers["x-replica"], bytes(self._audio), json.loads(message)["type"]


async def _until_a_replica_is_stopping(app_name: str) -> None:
    from ray import serve

    while True:
        status = await asyncio.to_thread(serve.status)
        app = status.applications.get(app_name)
        states = app.deployments["TTSReplica"].replica_states if app and "TTSReplica" in app.deployments else {}
        if any(str(state).endswith("STOPPING") and count for state, count in states.items()):
            return
        await asyncio.sleep(0.05)


def test_with_cache_aware_routing_off_the_same_request_lands_on_either_replica(
    ray_url: str, redis_url: str, http: httpx.Client
) -> None:
    """Redeployed with ``cache_aware_routing=False``: Ray's default router, so a key no longer sticks to one replica
    (the same request that stays on one replica above, with the switch on)."""
    from ray import serve

    from tests.ray.conftest import tiny_settings
    from turbotts.scaleout.launch import APP_NAME, build_application

    off = tiny_settings(redis_url, int(ray_url.rsplit(":", 1)[1]), cache_aware_routing=False)
    serve.run(build_application(off), name=APP_NAME, route_prefix="/")
    wait_ready(ray_url, 2)
    router = _replica_deployment().deployment_config.model_dump()["request_router_config"]
    assert router["request_router_class"] == "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter"
    text = "Affinity keeps this on one replica."
    replicas = Counter(_speech(http, text, seed=11).headers["x-replica"] for _ in range(20))
    assert len(replicas) == 2, replicas  # at random: all 20 on one replica has a chance of 2 in a million


def test_deleting_the_application_drains_in_flight_streams(ray_url: str) -> None:
    """Last: a redeploy or shutdown lets streams that already started finish (Ray waits for them)."""
    from ray import serve

    from turbotts.scaleout.launch import APP_NAME

    text = " ".join(f"Draining sentence {i}." for i in range(8))
    last_lines: list[str] = []

    async def one(client: httpx.AsyncClient, started: asyncio.Event) -> None:
        async with client.stream("POST", SPEECH, json={"input": text, "stream_format": "sse"}) as response:
            last = ""
            async for line in response.aiter_lines():
                started.set()
                last = line or last
            last_lines.append(last)

    async def main() -> None:
        async with httpx.AsyncClient(base_url=ray_url, timeout=httpx.Timeout(60)) as client:
            events = [asyncio.Event() for _ in range(4)]
            tasks = [asyncio.create_task(one(client, event)) for event in events]
            await asyncio.gather(*(event.wait() for event in events))
            deleting = asyncio.create_task(asyncio.to_thread(serve.delete, APP_NAME))
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            await deleting

    asyncio.run(main())
    assert all("speech.audio.done" in line for line in last_lines), last_lines
    assert httpx.get(f"{ray_url}/healthz", timeout=10).status_code == 404  # the application is gone
