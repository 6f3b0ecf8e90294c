"""Cache-aware routing: the same cache key goes to the same replica, unless that replica is far busier.

A Ray Serve request router (it runs where the handle is: in the ingress). A
request with a routing key (:func:`turbotts.scaleout.routing.routing_key`) is
offered first to the replica the rendezvous hash prefers, then to the others in
rendezvous order, so repeated requests hit that replica's in-process L1 cache.
When the preferred replica's queue is longer than the shortest queue by more
than ``affinity_imbalance`` requests (the server setting of that name), affinity
yields: the request goes to the least-loaded replica, as Ray's
``PrefixCacheAffinityRouter`` does for LLM prefixes (its ``imbalanced_threshold``).
Requests without a key go to the least-loaded replica.
"""

from __future__ import annotations

import math
import random

from ray.serve.request_router import (
    FIFOMixin,
    LocalityMixin,
    MultiplexMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from turbotts.scaleout.routing import rendezvous

ROUTING_KEY_KWARG = "routing_key"


class CacheAffinityRouter(FIFOMixin, LocalityMixin, MultiplexMixin, RequestRouter):
    """Rendezvous affinity on the cache key, least-loaded fallback (``request_router_kwargs``: the threshold)."""

    def initialize_state(self, affinity_imbalance: int = 4, **kwargs: object) -> None:
        self._affinity_imbalance = affinity_imbalance

    async def _queue_lens(self, replicas: list[RunningReplica]) -> dict[ReplicaID, int]:
        """Known queue lengths: from Ray's cache, probing the replicas it has no fresh entry for."""
        lens: dict[ReplicaID, int] = {}
        missing: list[RunningReplica] = []
        for replica in replicas:
            queue_len = self.replica_queue_len_cache.get(replica.replica_id)
            if queue_len is None:
                missing.append(replica)
            else:
                lens[replica.replica_id] = queue_len
        if missing:
            for replica, queue_len in await self._probe_queue_lens(missing, 0):
                if queue_len is not None:
                    lens[replica.replica_id] = queue_len
        return lens

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        """Ranks of replicas; Ray takes the least-loaded replica of the first rank that accepts."""
        key = pending_request.kwargs.get(ROUTING_KEY_KWARG) if pending_request is not None else None
        least_loaded = [random.sample(candidate_replicas, len(candidate_replicas))]  # ties broken at random
        if not key or len(candidate_replicas) < 2:
            return least_loaded
        by_name = {replica.replica_id.unique_id: replica for replica in candidate_replicas}
        order = [by_name[name] for name in rendezvous(str(key), by_name)]
        lens = await self._queue_lens(candidate_replicas)
        preferred_len = lens.get(order[0].replica_id, math.inf)
        shortest = min(lens.values(), default=math.inf)
        if preferred_len - shortest > self._affinity_imbalance:
            return least_loaded  # affinity yields
        return [[order[0]], order[1:]]
