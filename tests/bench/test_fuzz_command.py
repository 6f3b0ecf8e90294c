"""``scripts/fuzz.sh N`` end to end: a live ``turbotts serve`` on tiny weights takes mixed malformed and valid
HTTP and WebSocket traffic without a 5xx or a dropped connection; against a broken server it exits 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fuzz_script_finds_nothing_wrong_with_a_live_server(tmp_path: Path) -> None:
    out = tmp_path / "fuzz.json"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "fuzz.sh"), "200", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report == json.loads(result.stdout)
    assert report["requests"] == 200 and sum(report["statuses"].values()) == 200
    assert report["num_5xx"] == report["num_dropped"] == report["num_timeouts"] == 0
    assert report["num_bad_error_bodies"] == report["num_unexpected_statuses"] == report["num_server_tracebacks"] == 0
    statuses = report["statuses"]
    assert statuses.get("200", 0) > 0 and statuses.get("422", 0) > 0 and statuses.get("ws_done", 0) > 0
    assert any(label.startswith("ws_error_") for label in statuses)
    assert report["server_alive"] and report["after"]["is_ok"]
    rss = report["server_rss_bytes"]
    assert rss["start"] > 10 * 2**20 and rss["end"] > 10 * 2**20  # a Python process with torch loaded


class _BrokenHandler(BaseHTTPRequestHandler):
    """Answers every POST with a 500 and closes every other request without an answer."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"error": {"message": "boom", "type": "server_error"}}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.close_connection = True  # no status line at all: a dropped connection

    do_DELETE = do_PUT = do_PATCH = do_OPTIONS = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _broken_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fuzz_exits_1_and_counts_5xx_and_drops_of_a_broken_server() -> None:
    with _broken_server() as url:
        result = subprocess.run(
            [sys.executable, "-m", "turbotts", "fuzz", "60", "--url", url, "--concurrency", "4"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["requests"] == 60
    assert report["num_5xx"] > 0 and report["num_dropped"] > 0
    assert not report["after"]["is_ok"]
    assert "server_rss_bytes" not in report  # not our process: no memory figures
