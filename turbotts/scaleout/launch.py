"""``turbotts serve --backend ray``: join or start a Ray cluster, deploy ingress + replicas, serve until signalled.

The application is two deployments: ``TTSReplica`` (one model each, the count
or autoscaling range from the settings, ``max_ongoing_requests`` = the
engine's batch, the cache-aware router) and ``Ingress`` (no model; reads and
keys requests). Ray's HTTP proxy listens on ``host:port`` on every node.

A local cluster started here is told ``host`` as its node address (unless ``host``
is a wildcard) and runs no dashboard. What Ray cannot be told: its GCS, raylet,
dashboard agent and worker gRPC servers bind every interface (``0.0.0.0``/``::``)
whatever the node address, and a loopback node address is replaced by the
machine's routable one (docs/scale-out.md, "Network exposure").
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve.config import RequestRouterConfig

from turbotts.scaleout.ingress import ingress_deployment
from turbotts.scaleout.replica import TTSReplica
from turbotts.scaleout.router import CacheAffinityRouter
from turbotts.server.settings import ServerSettings

APP_NAME = "turbotts"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds this turbotts
_INGRESS_CONCURRENCY = 4096
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
logger = logging.getLogger(__name__)


def _scaling(settings: ServerSettings) -> dict[str, Any]:
    if settings.max_replicas is None:
        return {"num_replicas": settings.replicas}
    return {
        "autoscaling_config": {
            "min_replicas": settings.min_replicas,
            "max_replicas": settings.max_replicas,
            "target_ongoing_requests": settings.target_ongoing_requests,
        }
    }


def build_application(settings: ServerSettings) -> Any:
    """The bound Serve application for ``settings`` (nothing starts until ``serve.run``)."""
    options: dict[str, Any] = {
        "name": "TTSReplica",
        "max_ongoing_requests": settings.replica_concurrency(),
        "ray_actor_options": {"num_cpus": settings.replica_num_cpus, "num_gpus": settings.replica_num_gpus},
        "graceful_shutdown_timeout_s": settings.shutdown_grace_s,
        "health_check_period_s": 2.0,
        **_scaling(settings),
    }
    if settings.cache_aware_routing:
        router: Any = CacheAffinityRouter  # a class or an import path (typed as the path's dict)
        options["request_router_config"] = RequestRouterConfig(
            request_router_class=router,
            request_router_kwargs={"affinity_imbalance": settings.affinity_imbalance},
        )
    deployment: Any = serve.deployment
    replicas = deployment(TTSReplica).options(**options).bind(settings)
    ingress = deployment(ingress_deployment()).options(
        name="Ingress",
        max_ongoing_requests=_INGRESS_CONCURRENCY,
        ray_actor_options={"num_cpus": 0},
        graceful_shutdown_timeout_s=settings.shutdown_grace_s,  # it relays the streams the replicas drain
    )
    return ingress.bind(replicas, settings.max_segment_chars)


def app(args: dict[str, Any]) -> Any:
    """The application builder of a Serve config file (``import_path: turbotts.scaleout.launch:app``).

    ``args`` are settings by field name (the ``TURBOTTS_*`` environment fills the rest), as KubeRay's
    ``serveConfigV2`` gives them; the deployments' counts there override the settings' ones.
    """
    return build_application(ServerSettings(**{"backend": "ray", **args}))


def connect(settings: ServerSettings, **init_kwargs: Any) -> None:
    """Attach to ``ray_address`` (auto, ray://...) or start a local cluster that can import this turbotts."""
    if ray.is_initialized():
        return
    if settings.ray_address is not None:
        ray.init(address=settings.ray_address, **init_kwargs)
        return
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, path) if p)  # workers import our code
    ray.init(**{**local_cluster_options(settings), **init_kwargs})


def local_cluster_options(settings: ServerSettings) -> dict[str, Any]:
    """``ray.init`` options of a local cluster: no dashboard, and ``host`` as the node address unless a wildcard."""
    options: dict[str, Any] = {"include_dashboard": False, "dashboard_host": "127.0.0.1"}
    if settings.host not in _WILDCARD_HOSTS:
        options["_node_ip_address"] = settings.host  # Ray turns a loopback address into the routable one
    return options


def deploy(settings: ServerSettings) -> None:
    """Start the proxy on ``host:port`` and run the application (returns once the replicas are ready)."""
    if settings.redis_url is None and (settings.replicas > 1 or settings.max_replicas is not None):
        logger.warning(
            "no --redis-url: each replica keeps its own cache, rate limits and voices; "
            "set --redis-url so replicas share them"
        )
    serve.start(http_options={"host": settings.host, "port": settings.port})
    serve.run(build_application(settings), name=APP_NAME, route_prefix="/", blocking=False)


def run(settings: ServerSettings) -> None:
    """Serve until SIGTERM/SIGINT, then delete the application (Ray drains each replica's streams)."""
    connect(settings)
    deploy(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    serve.delete(APP_NAME)
    serve.shutdown()
