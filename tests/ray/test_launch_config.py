"""Settings -> the Serve application's deployment options, read back the way ``serve build`` writes them.

No cluster (:func:`tests.ray.conftest.deployment_options`): the options the
controller gets from ``serve.run``, a config file or KubeRay's ``serveConfigV2``.
test_ray_serve.py checks that the running deployment has them.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.ray.conftest import deployment_options

RAY_DEFAULT_ROUTER = "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter"


def _settings(**values: Any) -> Any:
    from turbotts.server.settings import ServerSettings

    return ServerSettings(**{"backend": "ray", "load_format": "dummy", **values})


def _options(settings: Any) -> dict[str, dict[str, Any]]:
    from turbotts.scaleout.launch import build_application

    return deployment_options(build_application(settings))


def _replicas(settings: Any) -> dict[str, Any]:
    return _options(settings)["TTSReplica"]


def _router(replicas: dict[str, Any]) -> str:
    """The request router class of a deployment (unset: Ray's default)."""
    return str(replicas.get("request_router_config", {}).get("request_router_class", RAY_DEFAULT_ROUTER))


def test_a_fixed_count_is_num_replicas_without_autoscaling() -> None:
    replicas = _replicas(_settings(replicas=3, min_replicas=2))
    assert replicas["num_replicas"] == 3
    assert "autoscaling_config" not in replicas


def test_max_replicas_turns_on_autoscaling_between_min_and_max() -> None:
    replicas = _replicas(_settings(replicas=3, min_replicas=2, max_replicas=5, target_ongoing_requests=6.0))
    assert replicas["autoscaling_config"] == {"min_replicas": 2, "max_replicas": 5, "target_ongoing_requests": 6.0}
    assert "num_replicas" not in replicas  # the count is the autoscaler's, not --replicas


def test_the_replica_and_ingress_options_come_from_the_settings() -> None:
    settings = _settings(max_batch_size=12, replica_num_cpus=2.5, replica_num_gpus=0.5, shutdown_grace_s=33.0)
    deployments = _options(settings)
    replicas, ingress = deployments["TTSReplica"], deployments["Ingress"]
    assert replicas["max_ongoing_requests"] == 12  # the engine's batch, not Ray's default of 5
    assert replicas["ray_actor_options"] == {"num_cpus": 2.5, "num_gpus": 0.5}
    assert replicas["graceful_shutdown_timeout_s"] == 33.0
    assert ingress["ray_actor_options"] == {"num_cpus": 0.0}  # no model in the ingress
    assert ingress["graceful_shutdown_timeout_s"] == 33.0  # it relays the streams the replicas drain
    assert _replicas(_settings(max_batch_size=12, max_ongoing_requests=3))["max_ongoing_requests"] == 3


def test_cache_aware_routing_sets_the_affinity_router_and_off_leaves_rays_default() -> None:
    on = _replicas(_settings(affinity_imbalance=7))
    assert _router(on) == "turbotts.scaleout.router.CacheAffinityRouter"
    assert on["request_router_config"]["request_router_kwargs"] == {"affinity_imbalance": 7}
    assert _router(_replicas(_settings(cache_aware_routing=False, affinity_imbalance=7))) == RAY_DEFAULT_ROUTER


def test_the_environment_and_a_serve_config_file_map_like_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TURBOTTS_*`` variables and KubeRay's ``args`` (:func:`launch.app`) reach the same deployment options."""
    from turbotts.scaleout.launch import app

    expected = {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2.0}
    from_args = deployment_options(app({"load_format": "dummy", "max_replicas": 4, "target_ongoing_requests": 2.0}))
    assert from_args["TTSReplica"]["autoscaling_config"] == expected
    monkeypatch.setenv("TURBOTTS_MAX_REPLICAS", "4")
    monkeypatch.setenv("TURBOTTS_TARGET_ONGOING_REQUESTS", "2")
    monkeypatch.setenv("TURBOTTS_CACHE_AWARE_ROUTING", "false")
    from_env = deployment_options(app({"load_format": "dummy"}))["TTSReplica"]
    assert from_env["autoscaling_config"] == expected
    assert _router(from_env) == RAY_DEFAULT_ROUTER
