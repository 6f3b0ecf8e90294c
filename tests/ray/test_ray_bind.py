"""Where the Ray cluster the tests start listens: the Serve HTTP proxy on ``--host`` (127.0.0.1 here) only.

The cluster of tests/ray/conftest.py is started by :func:`turbotts.scaleout.launch.connect` from settings
with ``host=127.0.0.1``; its processes are this test process's descendants. What Ray cannot be told (its
GCS, raylet, dashboard agent and worker gRPC servers bind every interface) is listed, not asserted: see
docs/scale-out.md, "Network exposure".
"""

from __future__ import annotations

from typing import Any

import psutil

WILDCARDS = {"0.0.0.0", "::"}


def _listening() -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of this process and its descendants."""
    me = psutil.Process()
    found = []
    for process in [me, *me.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="tcp")
            name = process.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found += [(name, c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN]
    return found


def test_the_serve_http_proxy_listens_on_the_host_only(ray_url: str) -> None:
    port = int(ray_url.rsplit(":", 1)[1])
    listening = _listening()
    on_port = [(name, ip) for name, ip, p in listening if p == port]
    assert on_port, f"nothing of this cluster listens on the proxy's port {port}: {listening}"
    assert {ip for _, ip in on_port} == {"127.0.0.1"}, on_port
    # what Ray binds whatever it is told (documented in docs/scale-out.md), for the record of this run
    exposed = sorted({(name, ip) for name, ip, p in listening if ip in WILDCARDS and p != port})
    print(f"\nRay's own servers on every interface (Ray has no option for them): {exposed}")


def _options(host: str) -> dict[str, Any]:
    from turbotts.scaleout.launch import local_cluster_options
    from turbotts.server.settings import ServerSettings

    return local_cluster_options(ServerSettings(backend="ray", load_format="dummy", host=host))


def test_the_node_address_is_the_host_unless_a_wildcard() -> None:
    assert _options("10.1.2.3") == {
        "include_dashboard": False,
        "dashboard_host": "127.0.0.1",
        "_node_ip_address": "10.1.2.3",
    }
    assert _options("127.0.0.1")["_node_ip_address"] == "127.0.0.1"
    for wildcard in ("0.0.0.0", "::"):
        assert "_node_ip_address" not in _options(wildcard)
