"""Optional dependencies: a missing one is named with the pip command that installs it.

Why: ``turbotts serve`` without the server extra used to die with a bare
``ModuleNotFoundError: uvicorn``. Commands call :func:`require` before doing any
work, and the CLI turns any late ``ModuleNotFoundError`` of a module listed here
into the same one-line message (:func:`explain_missing`).
"""

from __future__ import annotations

import importlib

from turbotts.errors import MissingDependencyError

#: import name -> (distribution on PyPI, the turbotts extra that brings it)
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "fastapi": ("fastapi", "server"),
    "uvicorn": ("uvicorn", "server"),
    "pydantic_settings": ("pydantic-settings", "server"),
    "prometheus_client": ("prometheus-client", "server"),
    "av": ("av", "server"),
    "redis": ("redis", "server"),
    "ahocorasick": ("pyahocorasick", "server"),
    "cryptography": ("cryptography", "server"),
    "matplotlib": ("matplotlib", "server"),
    "websockets": ("websockets", "server"),
    "yaml": ("pyyaml", "server"),
    "httpx": ("httpx", "server"),  # the `turbotts loadtest` client
    "onnxruntime": ("onnxruntime", "ort"),  # `turbotts ort-vocoder`
    "onnx": ("onnx", "ort"),
    "onnxscript": ("onnxscript", "ort"),
    "ray": ("ray[serve]", "ray"),  # serve --backend ray
}
#: what ``turbotts serve`` imports (matplotlib draws benchmark plots, httpx is the load test's client:
#: neither is imported at start-up)
SERVE_MODULES = tuple(
    name for name, (_, extra) in OPTIONAL_MODULES.items() if extra == "server" and name not in ("matplotlib", "httpx")
)


def _message(module: str, purpose: str) -> str:
    distribution, extra = OPTIONAL_MODULES[module]
    return f"{purpose} needs {distribution}, which is not installed: pip install 'turbotts[{extra}]'"


def require(*modules: str, purpose: str) -> None:
    """Import each module now, so a missing one fails before any work starts.

    Raises:
        MissingDependencyError: the first module that cannot be imported, with the pip command.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise MissingDependencyError(_message(module, purpose)) from exc


def explain_missing(exc: ModuleNotFoundError, purpose: str) -> MissingDependencyError | None:
    """The one-line error for a ModuleNotFoundError of an optional module; None for any other module."""
    top = (exc.name or "").split(".")[0]
    return MissingDependencyError(_message(top, purpose)) if top in OPTIONAL_MODULES else None
