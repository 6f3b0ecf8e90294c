"""Settings precedence and the `turbotts serve` command's start-up failure path."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from turbotts.errors import CheckpointError, InvalidInputError
from turbotts.server.settings import ServerSettings


@pytest.mark.parametrize(
    ("name", "text"),
    [("c.yaml", "port: 9001\nmax_input_chars: 100\n"), ("c.json", '{"port": 9001, "max_input_chars": 100}'),
     ("c.toml", "port = 9001\nmax_input_chars = 100\n")],
)  # fmt: skip
def test_flags_beat_environment_beat_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    monkeypatch.setenv("TURBOTTS_MAX_INPUT_CHARS", "200")
    settings = ServerSettings(config_file=path)
    assert settings.port == 9001 and settings.max_input_chars == 200
    assert ServerSettings(config_file=path, max_input_chars=300).max_input_chars == 300


def test_bad_settings_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        ServerSettings(config_file=tmp_path / "missing.yaml")
    with pytest.raises(CheckpointError, match="not both"):
        ServerSettings(load_format="dummy", checkpoint=tmp_path)


def test_lossy_bit_rates_are_settings_within_the_codec_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [ServerSettings().bit_rate_kbps(fmt) for fmt in ("mp3", "opus", "aac", "wav", "flac")] == [
        128, 64, 96, None, None
    ]  # fmt: skip
    monkeypatch.setenv("TURBOTTS_MP3_BIT_RATE_KBPS", "64")
    assert ServerSettings(aac_bit_rate_kbps=48).bit_rate_kbps("mp3") == 64
    assert ServerSettings(aac_bit_rate_kbps=48).bit_rate_kbps("aac") == 48
    for name, bad in (("mp3_bit_rate_kbps", 320), ("opus_bit_rate_kbps", 5), ("aac_bit_rate_kbps", 256)):
        with pytest.raises(ValidationError, match=name):
            ServerSettings(**{name: bad})


def test_serve_without_reachable_hub_exits_2_quickly_with_advice(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TURBOTTS_HOME": str(tmp_path / "nothing"),
           "TURBOTTS_VOICES_DB": str(tmp_path / "v.sqlite3")}  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "turbotts", "serve", "--port", "0"], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 2, result.stderr
    assert "--load-format dummy" in result.stderr and "--checkpoint" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60  # seconds of imports on a busy CI box, not a hang


def test_admission_settings_reach_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    default = ServerSettings().engine_config()
    assert (default.admission, default.realtime_margin, default.max_queue_wait_s) == ("realtime", 0.2, 30.0)
    assert default.realtime_capacity_override is None
    monkeypatch.setenv("TURBOTTS_REALTIME_MARGIN", "0.5")
    config = ServerSettings(admission="off", max_queue_wait_s=0, realtime_capacity_override=3).engine_config()
    assert (config.admission, config.realtime_margin, config.max_queue_wait_s) == ("off", 0.5, 0.0)
    assert config.realtime_capacity_override == 3
    for name, bad in (("admission", "fifo"), ("realtime_margin", -0.1), ("max_queue_wait_s", -1),
                      ("realtime_capacity_override", -1)):  # fmt: skip
        with pytest.raises(ValidationError, match=name):
            ServerSettings(**{name: bad})
