"""The documentation: the MkDocs site builds strictly, its generated pages cover the code, and the README stays short.

The site's strict build fails on any warning: a broken link or anchor, a link it cannot resolve, a page left
out of the nav (``mkdocs.yml`` ``validation``). The generated pages (``docs/hooks/reference.py``) must name
every ``turbotts`` command, every server setting and every benchmark result file. The README stays a short
introduction; the sections it used to hold each live on a docs page: :data:`FORMER_README_SECTIONS`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import typer
import yaml

from turbotts.cli import app
from turbotts.server.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 250
#: the README's ``## `` sections before it became a short introduction, and the docs page that holds each now
FORMER_README_SECTIONS = {
    "Quick start": "getting-started.md",
    "What is here": "index.md",
    "Command line": "cli.md",
    "Python API": "python-api.md",
    "HTTP API": "http/speech.md",
    "Voices": "http/voices.md",
    "Captions and timestamps": "http/captions.md",
    "SSML input": "http/ssml.md",
    "Playground": "http/playground.md",
    "Parity with the official package": "parity.md",
    "Engine design": "engine.md",
    "Benchmarks": "benchmarks/index.md",
    "Precision modes": "performance/precision.md",
    "Production guards": "operations/guards.md",
    "Operating it": "operations/monitoring.md",
    "Scale-out on Ray Serve": "scale-out.md",
    "Development": "development/testing.md",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built with ``mkdocs build --strict``; fails on any warning, not only on the ones strict counts."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about its future, not about these docs
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert not warnings, "\n".join(warnings)
    return out


def _page_text(site: Path, page: str) -> str:
    html = (site / page / "index.html").read_text(encoding="utf-8")
    return re.sub(r"<[^>]+>", "", html)


def _command_paths(command: typer.core.TyperGroup, ctx: object, path: str) -> list[str]:
    paths = [path]
    for name in command.list_commands(ctx) if hasattr(command, "list_commands") else []:
        sub = command.get_command(ctx, name)
        paths += _command_paths(sub, sub.context_class(sub, info_name=name, parent=ctx), f"{path} {name}")
    return paths


def test_the_site_builds_strictly_without_a_warning(site: Path) -> None:
    assert (site / "index.html").is_file()


def test_the_cli_page_names_every_command_and_option(site: Path) -> None:
    text = _page_text(site, "cli")
    root = typer.main.get_command(app)
    paths = _command_paths(root, root.context_class(root, info_name="turbotts"), "turbotts")
    assert len(paths) > 15
    missing = [path for path in paths if path not in text]
    assert not missing, f"the generated CLI page lacks {missing}"
    for option in ("--max-new-tokens", "--captions", "--num-requests", "--slo-ttfa-s"):
        assert option in text


def test_the_configuration_page_names_every_setting(site: Path) -> None:
    text = _page_text(site, "configuration")
    missing = [name for name in ServerSettings.model_fields if name not in text]
    assert not missing, f"the generated configuration page lacks {missing}"
    assert "TURBOTTS_MAX_BATCH_SIZE" in text


def test_the_benchmark_results_page_names_every_result_file(site: Path) -> None:
    text = _page_text(site, "benchmarks/results")
    files = [path.relative_to(DOCS / "benchmarks").as_posix() for path in (DOCS / "benchmarks").rglob("*.json")]
    assert files
    missing = [name for name in files if name not in text]
    assert not missing, f"the generated results page lacks {missing}"


def test_the_capacity_page_shows_each_configurations_count_from_its_json(site: Path) -> None:
    text = _page_text(site, "benchmarks/capacity")
    configs = json.loads((DOCS / "benchmarks" / "capacity" / "capacity.json").read_text())["configs"]
    assert len(configs) >= 2
    for config in configs:
        assert f"{config['label']} | {config['capacity']} |" in text.replace("**", "") or re.search(
            rf"{re.escape(config['label'])}\s*{config['capacity']}\s*{config['stop_reason']}", text
        ), config["label"]
        for level in config["levels"]:
            assert f"{level['throughput_audio_s_per_s']:.2f}" in text


def test_the_capacity_page_shows_the_engine_alone_from_its_json(site: Path) -> None:
    text = _page_text(site, "benchmarks/capacity")
    reports = sorted((DOCS / "benchmarks" / "capacity").glob("engine_listeners_*.json"))
    assert reports
    for path in reports:
        report = json.loads(path.read_text())
        for run in report["runs"]:
            row = (
                f"{report['listeners']} | {run['scheduling']} | {run['num_streams']} | {run['continuity_rate']:.2f} "
                f"| {run['stall_s_total']:.2f} | {run['audio_s_per_s']:.2f}"
            )
            assert row in text or re.search(r"\s+".join(map(re.escape, row.replace("|", " ").split())), text), row


def _benchmark_tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_tables", ROOT / "scripts" / "benchmark_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_benchmark_tables_have_one_section_per_machine_kind() -> None:
    tables = _benchmark_tables()
    markdown = tables.benchmark_markdown(DOCS / "benchmarks")
    compared = sorted(path.name for path in (DOCS / "benchmarks" / "compare").iterdir() if path.is_dir())
    sections = re.findall(r"^## .*ISA `([a-z0-9_]+)`$", markdown, re.MULTILINE)
    assert sorted(set(sections)) == sorted(sections), "a machine kind has two sections"
    assert set(compared) <= set(sections)
    for result in tables.load_results(DOCS / "benchmarks"):
        assert result.machine.isa in sections, result.path


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to a docs page"


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
    assert targets
    missing = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def _nav_pages(nav: list[object]) -> set[str]:
    pages: set[str] = set()
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            pages |= _nav_pages(value) if isinstance(value, list) else {str(value)}
    return pages


@pytest.mark.parametrize(("section", "page"), FORMER_README_SECTIONS.items())
def test_every_former_readme_section_lives_on_a_docs_page(section: str, page: str) -> None:
    path = DOCS / page
    assert path.is_file(), f"README section {section!r} should live in docs/{page}"
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    assert page in _nav_pages(config["nav"]), f"docs/{page} is not in mkdocs.yml's nav"
    headings = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert any(section.lower() in heading.lower() for heading in headings), f"docs/{page} has no {section!r} heading"
