"""Guard settings: validation with advice, and no secret in the start-up log line."""

from __future__ import annotations

import pydantic
import pytest

from turbotts.server.settings import ServerSettings


def test_guard_settings_are_validated_with_advice() -> None:
    with pytest.raises(pydantic.ValidationError, match="openssl rand -hex 32"):
        ServerSettings(load_format="dummy", watermark_key="abcd")
    with pytest.raises(pydantic.ValidationError, match="fallback_clip"):
        ServerSettings(load_format="dummy", degrade_mode="fallback")
    with pytest.raises(pydantic.ValidationError, match="rate_limit_burst"):
        ServerSettings(load_format="dummy", rate_limit_rps=5, rate_limit_burst=0)


def test_defaults_need_no_redis_and_summary_hides_secrets() -> None:
    settings = ServerSettings(
        load_format="dummy", watermark_key="ab" * 32, redis_url="redis://:hunter2@127.0.0.1:6379/0", api_keys="sk-x"
    )
    summary = settings.summary()
    assert "hunter2" not in summary and "abab" not in summary and "sk-x" not in summary
    assert "redis=True" in summary and "auth=True" in summary
    default = ServerSettings(load_format="dummy")
    assert default.redis_url is None and default.watermark and default.rate_limit_rps == 10.0
