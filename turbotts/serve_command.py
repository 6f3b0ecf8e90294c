"""``turbotts serve``: settings from flags, environment and file, then uvicorn with a real drain on SIGTERM.

No flag is declared here. :func:`serve_command` derives one per field of
:class:`~turbotts.server.settings.ServerSettings`, the one place a setting is declared (name, type,
default, bounds, help), through :func:`~turbotts.server.settings_reference.setting_specs`, which the
docs' configuration page is generated from too. A flag left off the command line is not passed on,
so the ``TURBOTTS_*`` environment and the ``--config`` file still apply (flags > environment > file).
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from turbotts.cli_options import fail
from turbotts.errors import TurboTTSError
from turbotts.optional import SERVE_MODULES, explain_missing, require

if TYPE_CHECKING:
    from pydantic import ValidationError

    from turbotts.server.settings import ServerSettings
    from turbotts.server.settings_reference import SettingSpec

S = TypeVar("S", bound="ServerSettings")
SERVE_HELP = "Serve the OpenAI-compatible speech API (flags > TURBOTTS_* environment > --config file > defaults)."
_CLI_TYPES: tuple[type, ...] = (bool, int, float, str, Path)  # parsed as they are; anything else as text


class _StartupTracebackFilter(logging.Filter):
    """Drops uvicorn's traceback for start-up errors of our own: serve prints their message instead."""

    def __init__(self, server_app: Any) -> None:
        super().__init__()
        self.server_app = server_app

    def filter(self, record: logging.LogRecord) -> bool:
        is_ours = isinstance(self.server_app.state.startup_error, TurboTTSError)
        return not (is_ours and str(record.msg).startswith("Traceback"))


def serve_command(settings_cls: type[S], run: Callable[[S], None] | None = None) -> Callable[..., None]:
    """The ``serve`` command for ``app.command("serve")``: one option per field of ``settings_cls``.

    Each option is the field's flag (``--max-batch-size``; a bool is ``--x/--no-x``; older spellings
    from its ``flag_aliases`` too), typed from the field (a ``Literal`` lists its choices), with the
    field's description as help and its default shown. Options default to None, meaning "not given".

    Args:
        settings_cls: :class:`ServerSettings` or a subclass: its fields are the flags.
        run: what to do with the settings built (default :func:`serve_settings`: start the server).
    """
    from turbotts.server.settings_reference import setting_specs

    specs = setting_specs(settings_cls)

    def serve(**flags: Any) -> None:
        require(*SERVE_MODULES, purpose="turbotts serve")
        given = {name: _plain(value) for name, value in flags.items() if value is not None}
        (run or serve_settings)(build_settings(settings_cls, given))

    serve.__signature__ = inspect.Signature([_parameter(spec) for spec in specs])  # type: ignore[attr-defined]
    serve.__doc__ = SERVE_HELP
    return serve


def build_settings(settings_cls: type[S], flags: dict[str, Any]) -> S:
    """``settings_cls`` from the flags given (they win), the environment and the ``--config`` file.

    Raises:
        typer.Exit: code 2 after naming the bad setting, its flag and its environment variable.
    """
    from pydantic import ValidationError

    try:
        return settings_cls(**flags)
    except ValidationError as exc:
        raise fail(_validation_message(exc, settings_cls)) from exc


def _parameter(spec: SettingSpec) -> inspect.Parameter:
    decls = [f"{spec.flags[0]}/{spec.flags[1]}", *spec.flag_aliases] if spec.is_bool else list(spec.flags)
    option = typer.Option(*decls, help=_help(spec), show_default=spec.default or False, rich_help_panel=spec.group)
    annotation: Any = Annotated[_cli_type(spec) | None, option]
    return inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def _cli_type(spec: SettingSpec) -> Any:
    """What the command line parses the flag as; pydantic validates the result like any other source."""
    if spec.choices:
        return enum.Enum(f"{spec.name}_choice", [(choice, choice) for choice in spec.choices])
    if spec.value_type in _CLI_TYPES:
        return spec.value_type
    return str  # SecretStr and anything else: pydantic parses the text


def _help(spec: SettingSpec) -> str:
    from rich.markup import escape  # typer renders help as rich markup: a "[word]" would vanish

    return escape(spec.description) + (f" Range: {spec.bounds}." if spec.bounds else "")


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def serve_settings(settings: ServerSettings) -> None:
    """Serve with ``settings`` until told to stop: uvicorn and a drain on SIGTERM, or Ray Serve replicas."""
    import uvicorn

    from turbotts.server.ops.context import configure_logging
    from turbotts.server.web.app import create_app

    configure_logging(settings.log_level, settings.log_format)
    if settings.backend == "ray":
        require("ray", purpose="turbotts serve --backend ray")
        from turbotts.scaleout.launch import run

        run(settings)
        return
    server_app = create_app(settings)
    from turbotts.server.ops.drain import DrainingServer

    server = DrainingServer(
        uvicorn.Config(
            server_app,
            host=settings.host,
            port=settings.port,
            lifespan="on",
            ws="websockets-sansio",
            log_level=settings.log_level,
            log_config=None,  # uvicorn's records go to our (redacted, request-id) root handlers
            timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
        ),
        server_app,
        settings.shutdown_grace_s,
    )
    logging.getLogger("uvicorn.error").addFilter(_StartupTracebackFilter(server_app))
    with contextlib.suppress(SystemExit):  # uvicorn exits 3 when start-up fails; we report it below
        server.run()
    error = server_app.state.startup_error
    if error is not None:
        raise fail(str(error) if isinstance(error, TurboTTSError) else f"start-up failed: {error!r}")
    if not server.started:
        raise fail(f"the server did not start (is {settings.host}:{settings.port} free?)")


def _validation_message(exc: ValidationError, settings_cls: type[ServerSettings]) -> str:
    """``port (--port, TURBOTTS_PORT): Input should be ...``: the first error, named as the user can fix it."""
    from turbotts.server.settings_reference import env_var_name, flag_name

    first = exc.errors()[0]
    name = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    if name in settings_cls.model_fields:
        name = f"{name} ({flag_name(name)}, {env_var_name(name, settings_cls)})"
    return f"{name}: {message}" if name else message


def _serve_needs_the_server_extra() -> None:
    """Serve the OpenAI-compatible speech API (needs the server extra: pip install 'turbotts[server]')."""
    require(*SERVE_MODULES, purpose="turbotts serve")


def _serve_for_server_settings() -> Callable[..., None]:
    """``serve`` over :class:`ServerSettings`; without the server extra (no pydantic-settings, no av...) a
    command that names what to install, so the rest of the command line keeps working."""
    try:
        from turbotts.server.settings import ServerSettings
    except ModuleNotFoundError as exc:
        if explain_missing(exc, "turbotts serve") is None:
            raise
        return _serve_needs_the_server_extra
    return serve_command(ServerSettings)


serve = _serve_for_server_settings()
