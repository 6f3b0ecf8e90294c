"""N mixed malformed and valid requests (HTTP and WebSocket) against a live server (``turbotts fuzz``).

The JSON report
counts statuses (overall and per case), 5xx answers, dropped connections
(closed or reset without a response), timeouts, error bodies that are not
OpenAI-shaped JSON, answers a case does not allow (a 4xx for a valid request,
a 2xx for a malformed one), tracebacks in the server's log, and the server's
resident memory at the start and the end. Afterwards a normal request and a
normal WebSocket session must still succeed; :func:`is_clean` says whether all
went well.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from turbotts.bench.fuzz_cases import (
    END,
    JSON_HEADERS,
    SPEECH,
    HttpCase,
    WsCase,
    make_picker,
    valid_speech_body,
    ws_config,
)
from turbotts.bench.fuzz_client import HttpOutcome, WsOutcome, build_request, exchange, ws_session
from turbotts.bench.fuzz_server import ServerProcess

WS_PATH = "/v1/audio/speech/ws"
MAX_EXAMPLES = 20  # failures kept in the report


@dataclass
class FuzzTally:
    """Everything counted during a run; :meth:`report` is the JSON."""

    statuses: Counter[str] = field(default_factory=Counter)
    by_case: dict[str, Counter[str]] = field(default_factory=dict)
    problems: Counter[str] = field(default_factory=Counter)
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def num_requests(self) -> int:
        return sum(self.statuses.values())

    def record_http(self, case: HttpCase, outcome: HttpOutcome) -> None:
        label = str(outcome.status) if outcome.status is not None else str(outcome.failure)
        problem = None
        if outcome.status is None:
            problem = str(outcome.failure)
        elif outcome.status >= 500:
            problem = "5xx"
        elif not case.accepts(outcome.status):
            problem = "unexpected_status"
        elif outcome.status >= 400 and case.needs_json_error and outcome.error_message is None:
            problem = "bad_error_body"
        self._record(case.name, label, problem, lambda: {"status": outcome.status, "body": outcome.body[:300]})

    def record_ws(self, case: WsCase, outcome: WsOutcome) -> None:
        problem = None
        if outcome.kind in ("dropped", "timeout"):
            problem = outcome.kind
        elif outcome.label != case.expect:
            problem = "unexpected_status"
        elif outcome.kind == "error" and not (outcome.error or {}).get("message"):
            problem = "bad_error_body"
        self._record(case.name, outcome.label, problem, lambda: {"outcome": outcome.label, "error": outcome.error})

    def _record(self, name: str, label: str, problem: str | None, detail: Any) -> None:
        self.statuses[label] += 1
        self.by_case.setdefault(name, Counter())[label] += 1
        if problem is not None:
            self.problems[problem] += 1
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append({"case": name, "problem": problem, **detail()})

    def report(self) -> dict[str, Any]:
        count = self.problems.get
        return {
            "requests": self.num_requests,
            "statuses": dict(sorted(self.statuses.items())),
            "num_5xx": count("5xx", 0),
            "num_dropped": count("dropped", 0) + count("bad_response", 0),
            "num_timeouts": count("timeout", 0),
            "num_bad_error_bodies": count("bad_error_body", 0),
            "num_unexpected_statuses": count("unexpected_status", 0),
            "by_case": {name: dict(sorted(c.items())) for name, c in sorted(self.by_case.items())},
            "failures": [_printable(example) for example in self.examples],
        }


def _printable(example: dict[str, Any]) -> dict[str, Any]:
    return {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in example.items()}


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


async def run_cases(
    url: str,
    num_requests: int,
    concurrency: int,
    seed: int,
    on_done: Callable[[], None] | None = None,
    timeout_s: float = 120.0,
) -> FuzzTally:
    """Send ``num_requests`` picked cases, ``concurrency`` at a time; ``on_done()`` after each."""
    host, port = _host_port(url)
    ws_url = f"ws://{host}:{port}{WS_PATH}"
    pick = make_picker(random.Random(seed))
    tally, next_index = FuzzTally(), iter(range(num_requests))

    async def worker() -> None:
        for index in next_index:
            case = pick(index)
            if isinstance(case, WsCase):
                tally.record_ws(case, await ws_session(ws_url, case.script, timeout_s))
            else:
                tally.record_http(case, await exchange(host, port, case.request, timeout_s))
            if on_done is not None:
                on_done()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tally


async def still_answers(url: str) -> dict[str, Any]:
    """A normal synthesis and a normal WebSocket session after the fuzzing."""
    host, port = _host_port(url)
    body = json.dumps({**valid_speech_body(random.Random(0)), "response_format": "wav"}).encode()
    request = build_request("POST", SPEECH, body, JSON_HEADERS)
    speech = await exchange(host, port, request)
    script = (ws_config(), json.dumps({"type": "text", "text": "Still here."}), END)
    session = await ws_session(f"ws://{host}:{port}{WS_PATH}", script)
    return {
        "speech_status": speech.status,
        "ws_outcome": session.label,
        "is_ok": speech.status == 200 and session.label == "ws_done",
    }


def fuzz_report(
    url: str, num_requests: int, concurrency: int, seed: int, server: ServerProcess | None
) -> dict[str, Any]:
    """Run the cases with a progress bar and return the whole report."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    rss_start = server.rss_bytes() if server is not None else None
    started = time.perf_counter()
    columns = (TextColumn("fuzz"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("fuzz", total=num_requests)
        tally = asyncio.run(run_cases(url, num_requests, concurrency, seed, lambda: progress.advance(task)))
    after = asyncio.run(still_answers(url))
    report = {**tally.report(), "elapsed_s": round(time.perf_counter() - started, 1), "after": after}
    if server is not None:
        report["server_alive"] = server.is_alive
        report["server_rss_bytes"] = {"start": rss_start, "end": server.rss_bytes()}
        tracebacks = server.tracebacks()
        report["num_server_tracebacks"] = len(tracebacks)
        report["server_tracebacks"] = tracebacks[:3]
    return report


def is_clean(report: dict[str, Any]) -> bool:
    """No 5xx, drop, timeout, bad error body, unexpected status or traceback; the server still answers."""
    counts = ("num_5xx", "num_dropped", "num_timeouts", "num_bad_error_bodies", "num_unexpected_statuses",
              "num_server_tracebacks")  # fmt: skip
    is_quiet = all(report.get(key, 0) == 0 for key in counts)
    return is_quiet and report["after"]["is_ok"] and report.get("server_alive", True)
