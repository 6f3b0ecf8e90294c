"""docs/architecture.md names, for each layer rule, the test that checks it: each named test must exist,
and every rule test in tests/test_layers.py must be named there (so the page and the checks move together)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "architecture.md"


def _rules_section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    return text[text.index("## Layers and their rules") :]


def _named_tests() -> set[tuple[str, str | None]]:
    """(file under tests/, function or None) for every `file.py::name` and `file.py` the rules table cites."""
    named: set[tuple[str, str | None]] = set()
    for row in _rules_section().splitlines():
        if not row.startswith("|"):
            continue
        cells = row.split("|")
        checked_by = cells[-2] if len(cells) > 3 else ""
        current_file = None
        for file, name in re.findall(r"`(?:([\w/]+\.py))?(?:::(\w+))?`", checked_by):
            current_file = file or current_file
            if current_file:
                named.add((current_file, name or None))
    return named


def _functions(path: Path) -> set[str]:
    return {
        node.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.FunctionDef)
    }


def test_every_test_the_page_names_exists() -> None:
    named = _named_tests()
    assert len(named) >= 10
    missing = sorted(
        f"{file}::{name}" if name else file
        for file, name in named
        if not (REPO / "tests" / file).is_file() or (name is not None and name not in _functions(REPO / "tests" / file))
    )
    assert missing == []


def test_every_rule_test_is_on_the_page() -> None:
    rule_tests = {name for name in _functions(REPO / "tests" / "test_layers.py") if name.startswith("test_")}
    cited = {name for file, name in _named_tests() if file == "test_layers.py"}
    helpers = {"test_relative_imports_are_read_as_the_modules_they_name", "test_every_module_belongs_to_a_known_layer"}
    assert rule_tests - helpers - cited == set()
