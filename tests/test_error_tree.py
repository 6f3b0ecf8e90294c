"""One error tree: every class lives in turbotts.errors, and the HTTP status its docstring table promises
is the one server/errors.py answers."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import turbotts.errors as errors_module
from turbotts.errors import OverloadedError, RateLimitedError, StreamCapacityError, TurboTTSError
from turbotts.server.errors import describe

PACKAGE = Path(__file__).resolve().parents[1] / "turbotts"


def _instance(cls: type[TurboTTSError]) -> TurboTTSError:
    if cls is RateLimitedError:
        return cls("slow down", 1.0)
    if cls is OverloadedError:
        return cls("busy", "queue", 1.0)
    if cls is StreamCapacityError:
        return cls("no real-time slot", 1.0)
    if cls.__name__ == "ContentFilteredError":
        return cls("term")  # type: ignore[call-arg]
    return cls("something happened")


def test_the_docstring_table_is_the_http_mapping() -> None:
    promised = dict(re.findall(r"(\w+Error)\s.*?\s(\d{3})$", errors_module.__doc__ or "", re.MULTILINE))
    assert len(promised) == 20
    for name, status in promised.items():
        cls = getattr(errors_module, name)
        assert describe(_instance(cls))[0] == int(status), name


def test_every_error_class_is_in_the_tree() -> None:
    tree = errors_module.__doc__ or ""
    for name, cls in inspect.getmembers(errors_module, inspect.isclass):
        if issubclass(cls, Exception):
            assert re.search(rf"\b{name}\b", tree), f"{name} is missing from the tree drawn in errors.py"


def test_no_exception_class_is_defined_outside_errors_py() -> None:
    defined_elsewhere = [
        f"{path.relative_to(PACKAGE.parent)}: {match}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "errors.py" or path.parent != PACKAGE
        for match in re.findall(r"^class (\w+)\((?:\w+Error|Exception)\b", path.read_text(encoding="utf-8"), re.M)
    ]
    assert defined_elsewhere == []
