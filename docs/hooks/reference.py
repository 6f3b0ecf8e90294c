"""MkDocs hook: the reference pages generated at build time, so they cannot drift from the code.

A page asks for generated Markdown with a marker line, replaced before the page is rendered:

- ``<!-- generated: cli -->``: every ``turbotts`` command and subcommand with its arguments and
  options (help, defaults, environment variables), read from the typer app ``turbotts.cli.app``;
- ``<!-- generated: settings -->``: every server setting, from
  ``turbotts.server.settings_reference.settings_markdown()``;
- ``<!-- generated: benchmarks -->``: one section of tables per machine kind, from the JSON files
  in ``docs/benchmarks/`` (``scripts/benchmark_tables.py``);
- ``<!-- generated: capacity -->``: the gap-free listener counts and every level, from
  ``docs/benchmarks/capacity/capacity.json`` (``scripts/capacity_tables.py``);
- ``<!-- generated: engine-listeners -->``: continuity and the engine's time by scheduling, from
  ``docs/benchmarks/capacity/engine_listeners_*.json`` (``scripts/capacity_tables.py``).

An unknown marker fails the build. ``mkdocs.yml`` names this file under ``hooks:`` and keeps it out
of the site (``exclude_docs``).
"""

from __future__ import annotations

import html
import importlib.util
import posixpath
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
#: typer shows an argument as {text} (or [text] when optional) in usage lines; click's style is TEXT
ARGUMENT_METAVAR = re.compile(r"(?<=[{\[])([a-z_]+)(?=[}\]])")
BENCHMARKS_DIR = "benchmarks"  # under docs_dir


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    def generate(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "cli":
            return cli_markdown()
        if name == "settings":
            return settings_markdown()
        if name == "benchmarks":
            return benchmarks_markdown(config, page.file.src_uri)
        if name == "capacity":
            return capacity_markdown(config)
        if name == "engine-listeners":
            return engine_listeners_markdown(config)
        known = "cli, settings, benchmarks, capacity or engine-listeners"
        raise PluginError(f"{page.file.src_uri}: unknown marker <!-- generated: {name} -->; use {known}")

    return MARKER.sub(generate, markdown)


# ---------------------------------------------------------------- the CLI


def cli_markdown() -> str:
    """A section per command, depth first: usage, help, then a table of its arguments and options."""
    import typer

    from turbotts.cli import app

    root = typer.main.get_command(app)
    return "\n\n".join(_command_sections(root, root.context_class(root, info_name="turbotts"), depth=0))


def _command_sections(command: Any, ctx: Any, depth: int) -> list[str]:
    sections = [_command_markdown(command, ctx, depth)]
    for name in command.list_commands(ctx) if hasattr(command, "list_commands") else []:
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            sub_ctx = sub.context_class(sub, info_name=name, parent=ctx)
            sections += _command_sections(sub, sub_ctx, depth + 1)
    return sections


def _command_markdown(command: Any, ctx: Any, depth: int) -> str:
    heading = "#" * min(depth + 2, 4)
    pieces = [ARGUMENT_METAVAR.sub(lambda m: m.group(1).upper(), p) for p in command.collect_usage_pieces(ctx)]
    pieces = [piece.replace("{", "").replace("}", "") for piece in pieces]
    usage = " ".join([ctx.command_path, *pieces])
    parts = [f"{heading} `{ctx.command_path}`", f"```text\n{usage}\n```"]
    if command.help:
        parts.append(_escape(_dedent(command.help)))
    if hasattr(command, "list_commands"):
        names = command.list_commands(ctx)
        parts.append("Commands: " + ", ".join(f"`{name}`" for name in names) + ".")
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False) and p.name != "help"]
    records = [param.get_help_record(ctx) for param in params]
    rows = [f"| `{names}` | {_escape(text, in_table=True) or ' '} |" for names, text in filter(None, records)]
    if rows:
        parts.append("| argument or option | what it does |\n|---|---|\n" + "\n".join(rows))
    return "\n\n".join(parts)


def _dedent(text: str) -> str:
    """A docstring's paragraphs, each on one line (click's ``\\b`` no-rewrap marks dropped)."""
    blocks = text.strip().split("\n\n")
    paragraphs = [" ".join(line.strip() for line in block.splitlines() if line.strip() != "\b") for block in blocks]
    return "\n\n".join(paragraphs)


def _escape(text: str, in_table: bool = False) -> str:
    """Help text as literal Markdown: no HTML, emphasis or links made by accident (``<speak>``, ``a*0.7``)."""
    text = html.escape(text, quote=False)
    for char in "*[]":
        text = text.replace(char, "\\" + char)
    return text.replace("|", "\\|").replace("\n", " ") if in_table else text


# ---------------------------------------------------------------- settings and benchmarks


def settings_markdown() -> str:
    from turbotts.server.settings_reference import settings_markdown as render

    return render()


def benchmarks_markdown(config: Any, src_uri: str) -> str:
    tables = _load_script(Path(config.config_file_path).parent / "scripts" / "benchmark_tables.py")
    root = Path(config.docs_dir) / BENCHMARKS_DIR
    prefix = posixpath.relpath(BENCHMARKS_DIR, posixpath.dirname(src_uri) or ".")
    return tables.benchmark_markdown(root, link_prefix="" if prefix == "." else prefix + "/")


def capacity_markdown(config: Any) -> str:
    tables = _load_script(Path(config.config_file_path).parent / "scripts" / "capacity_tables.py")
    return tables.capacity_markdown(Path(config.docs_dir) / BENCHMARKS_DIR / "capacity" / "capacity.json")


def engine_listeners_markdown(config: Any) -> str:
    tables = _load_script(Path(config.config_file_path).parent / "scripts" / "capacity_tables.py")
    return tables.engine_listeners_markdown(Path(config.docs_dir) / BENCHMARKS_DIR / "capacity")


def _load_script(path: Path) -> ModuleType:
    """The script as a module, loaded afresh on every build (``mkdocs serve`` picks up its edits)."""
    name = "turbotts_docs_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module
