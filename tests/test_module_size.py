"""No module in the package grows past a size a reader can hold: one job per module (STYLE.md, item 6)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "turbotts"
MAX_LINES = 330


def _num_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_the_line_limit() -> None:
    offenders = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {num_lines} lines"
        for path in PACKAGE.rglob("*.py")
        if (num_lines := _num_lines(path)) > MAX_LINES
    )
    assert offenders == [], f"split these into modules of one job each, at most {MAX_LINES} lines: {offenders}"


def test_the_check_sees_the_package() -> None:
    assert len(list(PACKAGE.rglob("*.py"))) > 50  # a wrong PACKAGE path would pass the limit vacuously
