"""Each server setting is declared once, as a field of ``ServerSettings``: its ``turbotts serve`` flag, its
``TURBOTTS_*`` variable, its ``--config`` key and its docs row all derive from that field."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import Field, SecretStr
from typer.main import get_command
from typer.testing import CliRunner

from tests.cli_runner import run_cli
from turbotts import serve_command as serve_module
from turbotts.serve_command import serve_command
from turbotts.server.settings import ServerSettings
from turbotts.server.settings_reference import env_var_name, flag_name, setting_specs, settings_markdown

WIDE = {"COLUMNS": "250"}  # no flag or help line cut by the terminal width
#: every flag ``serve`` took before its flags were derived, as README.md, docs/, scripts/, deploy/ and tests/ use them
FLAGS_IN_USE = (
    "--checkpoint", "--load-format", "--dummy-size", "--key-env", "--public-key", "--device", "--dtype", "--quant",
    "--vocoder-dtype", "--kv-dtype", "--host", "--port", "--config", "--redis-url", "--rate-limit-rps",
    "--rate-limit-burst", "--api-key-file", "--blocklist", "--no-watermark", "--cache-max-bytes", "--degrade-mode",
    "--fallback-clip", "--log-format", "--quality-baseline", "--admission", "--max-queue-wait-s",
    "--realtime-capacity", "--backend", "--replicas", "--min-replicas", "--max-replicas",
    "--target-ongoing-requests", "--ray-address",
)  # fmt: skip


class KnobSettings(ServerSettings):
    """The server's settings plus one new field, declared only here."""

    example_knob_s: float = Field(
        default=1.5, ge=0, description="An example knob, declared once.", json_schema_extra={"group": "Examples"}
    )


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TURBOTTS_"):
            monkeypatch.delenv(name)


def _serve(settings_cls: type[ServerSettings], *args: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """``serve ARGS`` built from ``settings_cls``: the settings it would serve with (None if it exited), its output."""
    built: list[ServerSettings] = []
    app = typer.Typer(add_completion=False)
    app.command("serve")(serve_command(settings_cls, run=built.append))
    result = CliRunner().invoke(app, list(args), env={**WIDE, **(env or {})})
    return (built[0] if built else None), result.output


def test_a_new_field_is_a_flag_an_env_var_a_file_key_and_a_docs_row(tmp_path: Path) -> None:
    _, help_text = _serve(KnobSettings, "--help")
    assert "--example-knob-s" in help_text and "An example knob, declared once." in help_text
    knob_line = help_text.split("--example-knob-s")[1].splitlines()[0]
    assert "1.5" in knob_line and "x>=0" in knob_line  # its default and bounds, shown from the model
    assert "--example-knob-s" not in _serve(ServerSettings, "--help")[1]

    assert _serve(KnobSettings, "--example-knob-s", "2.5")[0].example_knob_s == 2.5
    assert _serve(KnobSettings, env={"TURBOTTS_EXAMPLE_KNOB_S": "3.5"})[0].example_knob_s == 3.5
    config = tmp_path / "knob.yaml"
    config.write_text("example_knob_s: 4.5\nport: 9001\n")
    from_file = _serve(KnobSettings, "--config", str(config))[0]
    assert from_file.example_knob_s == 4.5 and from_file.port == 9001
    assert _serve(KnobSettings)[0].example_knob_s == 1.5

    row = next(line for line in settings_markdown(KnobSettings).splitlines() if "`example_knob_s`" in line)
    cells = ("`--example-knob-s`", "`TURBOTTS_EXAMPLE_KNOB_S`", "`1.5`", "`x>=0`", "An example knob, declared once.")
    assert all(cell in row for cell in cells), row
    assert "### Examples" in settings_markdown(KnobSettings)
    assert "example_knob_s" not in settings_markdown()


def test_flags_beat_the_environment_beats_the_file_and_flags_not_given_change_nothing(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("example_knob_s = 4.5\nport = 9001\nwatermark = true\nlog_format = 'text'\n")
    env = {"TURBOTTS_EXAMPLE_KNOB_S": "3.5", "TURBOTTS_WATERMARK": "false"}
    settings = _serve(KnobSettings, "--config", str(config), env=env)[0]
    got = (settings.example_knob_s, settings.port, settings.watermark, settings.log_format)
    assert got == (3.5, 9001, False, "text")  # the environment over the file; the file over the defaults
    flagged = _serve(KnobSettings, "--config", str(config), "--example-knob-s", "2.5", "--watermark", "--port", "9002",
                     "--log-format", "json", env=env)[0]  # fmt: skip
    assert (flagged.example_knob_s, flagged.port, flagged.watermark, flagged.log_format) == (2.5, 9002, True, "json")
    assert _serve(ServerSettings, "--no-watermark", env={"TURBOTTS_WATERMARK": "true"})[0].watermark is False


def test_bad_values_are_a_message_naming_the_flag_and_exit_2() -> None:
    app = typer.Typer(add_completion=False)
    app.command("serve")(serve_command(KnobSettings, run=lambda settings: None))
    runner = CliRunner()
    too_big = runner.invoke(app, ["--port", "70000"], env=WIDE)
    assert too_big.exit_code == 2 and "port (--port, TURBOTTS_PORT)" in too_big.output
    assert "less than or equal to 65535" in too_big.output
    negative = runner.invoke(app, ["--example-knob-s", "-1"], env=WIDE)
    assert negative.exit_code == 2 and "example_knob_s (--example-knob-s, TURBOTTS_EXAMPLE_KNOB_S)" in negative.output
    not_a_choice = runner.invoke(app, ["--degrade-mode", "panic"], env=WIDE)
    assert not_a_choice.exit_code == 2 and "--degrade-mode" in not_a_choice.output


def test_every_real_setting_has_help_a_flag_an_env_var_and_a_docs_row(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli("serve", "--help", env=WIDE)
    assert result.returncode == 0, result.stderr
    docs = settings_markdown()
    for name, field in ServerSettings.model_fields.items():
        assert field.description, f"{name} has no description"
        assert flag_name(name) in result.stdout, f"{flag_name(name)} is not in `turbotts serve --help`"
        assert env_var_name(name) == f"TURBOTTS_{name.upper()}"
        assert f"| `{name}` | `{flag_name(name)}`" in docs, f"{name} has no row in the docs"
    for spec in setting_specs():
        assert not spec.is_bool or spec.flags[1] in result.stdout, f"{spec.name}: no {spec.flags[1]}"
        assert not spec.choices or "|".join(spec.choices) in result.stdout, f"{spec.name}: choices not shown"
    for flag in FLAGS_IN_USE:
        assert flag in result.stdout, f"{flag} (used in the docs, scripts or tests) no longer exists"
    one_of_each_kind = {"port": "9001", "watermark": "false", "log_format": "text", "redis_url": "redis://x",
                        "max_replicas": "3", "fallback_clip": "/tmp/c.wav", "realtime_margin": "0.5"}  # fmt: skip
    for name, value in one_of_each_kind.items():
        monkeypatch.setenv(env_var_name(name), value)
    settings = ServerSettings()
    assert (settings.port, settings.watermark, settings.log_format, settings.max_replicas) == (9001, False, "text", 3)
    assert settings.redis_url is not None and settings.redis_url.get_secret_value() == "redis://x"
    assert (settings.fallback_clip, settings.realtime_margin) == (Path("/tmp/c.wav"), 0.5)


def test_the_flag_wins_over_the_environment_in_the_real_command(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[ServerSettings] = []
    monkeypatch.setattr(serve_module, "serve_settings", built.append)
    result = run_cli("serve", "--load-format", "dummy", "--port", "9002", "--config", "/nonexistent.yaml",
                     env={"TURBOTTS_PORT": "9001", "TURBOTTS_CONFIG_FILE": "/other.yaml"})  # fmt: skip
    assert result.returncode == 2 and "--config /nonexistent.yaml does not exist" in result.stderr  # the flag's file
    result = run_cli("serve", "--load-format", "dummy", "--port", "9002", env={"TURBOTTS_PORT": "9001"})
    assert result.returncode == 0, result.stderr
    assert built[0].port == 9002 and built[0].load_format == "dummy"


def test_secrets_never_show_in_help() -> None:
    class SecretSettings(ServerSettings):
        example_token: SecretStr = Field(
            default=SecretStr("hunter2"), description="A token.", json_schema_extra={"group": "Examples"}
        )

    token = next(spec for spec in setting_specs(SecretSettings) if spec.name == "example_token")
    assert token.is_secret and token.default is None
    env = {"TURBOTTS_WATERMARK_KEY": "ab" * 32, "TURBOTTS_REDIS_URL": "redis://:pw1234@host"}
    _, help_text = _serve(SecretSettings, "--help", env=env)
    assert "--example-token" in help_text and "--watermark-key" in help_text
    assert "hunter2" not in help_text and "abab" not in help_text and "pw1234" not in help_text
    assert "hunter2" not in settings_markdown(SecretSettings)


def test_the_serve_command_declares_no_setting_by_hand() -> None:
    """Its options are exactly the fields, and its source names no flag: a hand-written option fails here."""
    app = typer.Typer(add_completion=False)
    app.command("serve")(serve_command(ServerSettings, run=lambda settings: None))
    assert [param.name for param in get_command(app).params] == list(ServerSettings.model_fields)
    tree = ast.parse(Path(serve_module.__file__).read_text(encoding="utf-8"))
    flags = [
        node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and str(node.value).startswith("--")
    ]
    assert flags == []
    options = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr in ("Option", "Argument")]  # fmt: skip
    derive = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "_parameter")
    assert len(options) == 1 and any(node is options[0] for node in ast.walk(derive))  # the one that derives them
