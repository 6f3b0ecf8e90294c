from __future__ import annotations

from tests.conftest_redis import redis_server

__all__ = ["redis_server"]
