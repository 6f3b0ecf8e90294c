"""The import graph: no cycle between modules, and every layer imports only the layers below it.

Function-level (lazy) imports count too: a lazy import hides a cycle from Python, not from a reader.
Read from the source with ``ast``, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Collection
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "turbotts"
BASE = {"errors", "config", "params", "optional", "redaction", "audio", "digests"}
LAYERS_BELOW_CLI = ("text", "model", "cpu", "fidelity", "engine", "cache", "guard", "sources", "api", "server",
                    "cli_options", "bench", "quality", "seal_commands", "serve_command", "say_captions",
                    "scaleout")  # fmt: skip
#: layer -> the layers it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "config": {"errors"},
    "params": {"errors"},
    "optional": {"errors"},
    "redaction": set(),
    "audio": {"errors"},
    "digests": set(),
    "text": BASE,
    "model": BASE,  # the model never knows about requests, guards, the server, or CPUs
    "cpu": BASE | {"model"},  # the CPU speed path swaps modules into the model; the model never imports it
    "fidelity": BASE | {"model", "cpu"},  # how far a faster mode moves the output, and the auto gate on it
    "engine": BASE | {"text", "model", "cpu"},  # requests meet tensors here, and only here
    "cache": BASE,
    "guard": BASE | {"cache", "text"},  # guards never import the model or the engine
    "sources": BASE | {"model", "cpu", "fidelity", "guard"},
    "seal_commands": BASE | {"model", "guard"},
    "api": BASE | {"model", "engine", "text", "sources"},
    "server": BASE | {"text", "model", "cpu", "fidelity", "engine", "cache", "guard", "sources", "api", "quality"},
    "cli_options": BASE | {"sources"},
    "bench": BASE | {"text", "model", "cpu", "fidelity", "engine", "sources", "api", "cli_options"},
    "quality": BASE | {"text", "model", "cpu", "fidelity", "engine", "sources", "api", "cli_options", "bench"},
    "say_captions": BASE | {"text", "api", "server"},  # `say --captions` and SSML: the server's assembler
    "scaleout": BASE | {"text", "server"},  # Ray Serve around the unchanged server
    "serve_command": BASE | {"sources", "server", "cli_options", "scaleout"},
    # the command line may use every layer
    "cli": BASE | set(LAYERS_BELOW_CLI),
    "__main__": {"cli"},
    "__init__": BASE | {"api", "sources", "engine", "model"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module ``from <node.module> import ...`` names, written in ``module``: ``..server`` read from
    ``turbotts.model.gpt`` is ``turbotts.server``."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(source: str, module: str, is_package: bool, modules: Collection[str]) -> set[str]:
    """The turbotts modules ``source`` imports, relative imports and function-level ones included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported = _absolute(node, module, is_package)
            if imported == "turbotts" or imported.startswith("turbotts."):
                for alias in node.names:
                    target = f"{imported}.{alias.name}"
                    found.add(target if target in modules else imported)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
    return found


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        graph[name] = _imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", modules)
    return graph


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_layer_imports_only_layers_below_it() -> None:
    wrong = sorted(
        f"{source} imports {target}"
        for source, targets in _import_graph().items()
        for target in targets
        if _layer(target) != _layer(source) and _layer(target) not in ALLOWED[_layer(source)]
    )
    assert wrong == []


def test_relative_imports_are_read_as_the_modules_they_name() -> None:
    modules = {"turbotts.server", "turbotts.server.app", "turbotts.model", "turbotts.model.gpt", "turbotts.errors"}
    lazy = "def build():\n    from ..server import app\n    from .. import errors\n    from . import gpt\n"
    assert _imports(lazy, "turbotts.model.layers", False, modules) == {
        "turbotts.server.app", "turbotts.errors", "turbotts.model.gpt"
    }  # fmt: skip
    assert _imports("from .gpt import GPT\n", "turbotts.model", True, modules) == {"turbotts.model.gpt"}


def test_every_module_belongs_to_a_known_layer() -> None:
    assert {_layer(m) for m in _import_graph()} <= set(ALLOWED)


def test_the_import_graph_has_no_cycle() -> None:
    graph = _import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if target == module:
                continue
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []
