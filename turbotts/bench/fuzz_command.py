"""``turbotts fuzz N``: fuzz a live server and print a JSON report (exit 1 when anything went wrong).

By default it starts ``turbotts serve`` on tiny dummy weights on a free loopback
port; ``--url`` fuzzes a server that is already running instead (no memory
figures or log search then). The work is in :mod:`turbotts.bench.fuzz`, imported
only when the command runs, because it needs the server extras (h11, websockets).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer


def fuzz(
    num_requests: Annotated[int, typer.Argument(min=1, help="How many requests (HTTP and WebSocket) to send.")] = 1000,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Requests in flight at once.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Picks the same cases in the same order.")] = 0,
    url: Annotated[
        str | None, typer.Option("--url", help="Fuzz this running server instead of starting one (no RSS then).")
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the report here.")] = None,
) -> None:
    """Send malformed and valid requests to a live server; report status counts, 5xx, drops and memory."""
    from turbotts.bench.fuzz import fuzz_report, is_clean
    from turbotts.bench.fuzz_server import live_server

    if url is not None:
        report = fuzz_report(url.rstrip("/"), num_requests, concurrency, seed, None)
    else:
        with tempfile.TemporaryDirectory(prefix="turbotts-fuzz-") as tmp, live_server(Path(tmp)) as server:
            report = fuzz_report(server.url, num_requests, concurrency, seed, server)
    text = json.dumps(report, indent=2)
    if json_path is not None:
        json_path.write_text(text + "\n")
    typer.echo(text)
    raise typer.Exit(0 if is_clean(report) else 1)
