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


# --- the rules docs/architecture.md states, one test each ------------------------------------------------

#: the engine modules that hold tensors (the runner side); every other engine module is the scheduler side
ENGINE_TENSOR_MODULES = {
    "turbotts.engine.model_runner", "turbotts.engine.decode_path", "turbotts.engine.sampling_state",
    "turbotts.engine.runner_voices", "turbotts.engine.cuda_graphs", "turbotts.engine.sampler",
    "turbotts.engine.vocoder_runner", "turbotts.engine.streaming",
}  # fmt: skip
#: where the server holds tensors: cloning encodes a clip into codes; GPU memory for admission and Ray's replica
SERVER_TENSOR_MODULES = {
    "turbotts.server.voices.service", "turbotts.server.ops.guard_wiring", "turbotts.scaleout.replica",
}  # fmt: skip
HTTP_PACKAGES = ("turbotts.server.web", "turbotts.scaleout")  # Ray Serve's ingress and replica speak ASGI too
REDIS_MODULES = {
    "turbotts.cache.redis", "turbotts.guard.ratelimit", "turbotts.server.ops.connections",
    "turbotts.server.voices.redis_store",
}  # fmt: skip


def _third_party_imports() -> dict[str, set[str]]:
    """module -> the top-level names of every package it imports (lazy imports too)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found[module].add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found[module].update(alias.name.split(".")[0] for alias in node.names)
    return found


def _importers_of(package: str) -> set[str]:
    return {module for module, names in _third_party_imports().items() if package in names}


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_fastapi_only_in_the_http_layer() -> None:
    """The speech path, audio, voices and operations run without a web framework (and are tested so)."""
    web = _importers_of("fastapi") | _importers_of("starlette")
    assert web and {m for m in web if not _in(m, HTTP_PACKAGES)} == set()


def test_the_server_below_http_never_imports_it() -> None:
    """server/speech, audio, voices, ops, schemas and settings serve the HTTP layer; they never reach up into it."""
    below = ("turbotts.server.speech", "turbotts.server.audio", "turbotts.server.voices", "turbotts.server.ops",
             "turbotts.server.schemas", "turbotts.server.settings", "turbotts.server.settings_fields",
             "turbotts.server.settings_guard_fields")  # fmt: skip
    wrong = sorted(
        f"{source} imports {target}"
        for source, targets in _import_graph().items()
        if _in(source, below)
        for target in targets
        if _in(target, ("turbotts.server.web",))
    )
    assert wrong == []


def test_the_scheduler_side_of_the_engine_imports_no_torch() -> None:
    """Only the runner side touches tensors: the scheduler, KV slots, sequences and the core step stay plain Python."""
    engine = {m for m in _third_party_imports() if _in(m, ("turbotts.engine",))}
    assert engine >= ENGINE_TENSOR_MODULES
    assert {m for m in _importers_of("torch") & engine if m not in ENGINE_TENSOR_MODULES} == set()


def test_tensors_in_the_server_only_where_named() -> None:
    torch_users = {m for m in _importers_of("torch") if _in(m, ("turbotts.server", "turbotts.scaleout"))}
    assert torch_users == SERVER_TENSOR_MODULES


def test_text_guards_and_caches_import_no_torch() -> None:
    """text is pure str -> str; guards and caches work on bytes and arrays, never on the model's tensors."""
    wrong = {m for m in _importers_of("torch") if _in(m, ("turbotts.text", "turbotts.guard", "turbotts.cache"))}
    assert wrong == set()


def test_asyncio_and_threads_in_the_engine_only_in_the_async_front_end() -> None:
    users = (_importers_of("asyncio") | _importers_of("threading")) & {
        m for m in _third_party_imports() if _in(m, ("turbotts.engine",))
    }
    assert users == {"turbotts.engine.async_engine"}


def test_redis_only_behind_the_named_modules() -> None:
    assert _importers_of("redis") == REDIS_MODULES
