"""One error tree: every class lives in turbotts.errors, and the HTTP status its docstring table promises
is the one server/web/errors.py answers."""

from __future__ import annotations

import ast
import builtins
import inspect
import re
from pathlib import Path

import turbotts.errors as errors_module
from turbotts.errors import OverloadedError, RateLimitedError, StreamCapacityError, TurboTTSError
from turbotts.server.web.errors import describe

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
    assert len(promised) == 21
    for name, status in promised.items():
        cls = getattr(errors_module, name)
        assert describe(_instance(cls))[0] == int(status), name


def test_every_error_class_is_in_the_tree() -> None:
    tree = errors_module.__doc__ or ""
    for name, cls in inspect.getmembers(errors_module, inspect.isclass):
        if issubclass(cls, Exception):
            assert re.search(rf"\b{name}\b", tree), f"{name} is missing from the tree drawn in errors.py"


def _base_name(base: ast.expr) -> str:
    """The class a base names, without its module: ``errors.VoiceError`` and ``VoiceError`` are ``VoiceError``."""
    if isinstance(base, ast.Subscript):  # Generic[T]
        base = base.value
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else ""


def _exception_classes(sources: dict[str, str]) -> list[str]:
    """``where: name`` of each class in ``sources`` that derives, through any of its bases, from an exception:
    a builtin one, one of turbotts.errors, a third-party ``*Error``/``*Exception``, or another class found here."""
    classes = [
        (f"{where}: {node.name}", node.name, {_base_name(b) for b in node.bases})
        for where, source in sources.items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    ]
    known = {name for name, cls in vars(builtins).items() if isinstance(cls, type) and issubclass(cls, BaseException)}
    known |= {
        name for name, cls in inspect.getmembers(errors_module, inspect.isclass) if issubclass(cls, BaseException)
    }
    found: list[str] = []
    while new := [
        (where, name)
        for where, name, bases in classes
        if where not in found and any(b in known or b.endswith(("Error", "Exception")) for b in bases)
    ]:
        found += [where for where, _ in new]
        known |= {name for _, name in new}
    return sorted(found)


def test_no_exception_class_is_defined_outside_errors_py() -> None:
    sources = {
        str(path.relative_to(PACKAGE.parent)): path.read_text(encoding="utf-8")
        for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "errors.py"
    }
    assert _exception_classes(sources) == []


def test_the_check_reads_every_base() -> None:
    source = """
class Dotted(errors.VoiceError): ...
class Later(Generic[T], TurboTTSError): ...
class Builtin(RuntimeError): ...
class ThirdParty(httpx.HTTPError): ...
class Indirect(Later): ...
class Plain(Base, Protocol): ...
"""
    found = _exception_classes({"m.py": source, "n.py": "class Elsewhere(m.Indirect): ...\n"})
    assert found == [f"m.py: {name}" for name in ("Builtin", "Dotted", "Indirect", "Later", "ThirdParty")] + [
        "n.py: Elsewhere"
    ]
