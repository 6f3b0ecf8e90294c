"""Scale-out on Ray Serve: one model per replica, one endpoint, shared state in Redis.

``turbotts serve --backend ray`` runs :mod:`turbotts.scaleout.launch`. The path of a
request: Ray's HTTP proxy -> the ingress deployment (:mod:`.ingress`, reads the body
and computes the cache key) -> a replica picked by :class:`.router.CacheAffinityRouter`
-> the replica runs today's FastAPI app unchanged (:mod:`.bridge`) and streams its
ASGI messages back. Modules that import Ray are imported only by the ray backend.
"""
