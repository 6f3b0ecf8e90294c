"""The mutation guard's patches stay usable: each has its header, applies to today's code, and names tests
that exist. (Whether each mutant is killed is scripts/mutations.sh's job, run by .ci/run.)"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutations", REPO / "scripts" / "mutations.py")
assert _spec is not None and _spec.loader is not None
mutations = importlib.util.module_from_spec(_spec)
sys.modules["mutations"] = mutations  # dataclasses resolve their module by name
_spec.loader.exec_module(mutations)

PATCHES = sorted((REPO / "tests" / "mutations").glob("*.patch"))


def test_the_guard_has_enough_mutants() -> None:
    assert len(PATCHES) >= mutations.MIN_MUTANTS


@pytest.mark.parametrize("path", PATCHES, ids=lambda p: p.stem)
def test_each_patch_applies_and_names_existing_tests(path: Path) -> None:
    mutant = mutations.Mutant.read(path)
    check = subprocess.run(["git", "apply", "--check", str(path)], cwd=REPO, capture_output=True, text=True)
    assert check.returncode == 0, f"{path.name} no longer applies: {check.stderr}"
    for test_id in mutant.kills:
        file, _, name = test_id.partition("::")
        assert (REPO / file).is_file(), f"{path.name} names {file}, which does not exist"
        if name:
            function = name.split("::")[-1].split("[")[0]
            source = (REPO / file).read_text(encoding="utf-8")
            assert re.search(rf"def {re.escape(function)}\(", source), f"{path.name}: no test {test_id}"


def test_a_header_without_kills_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.patch"
    bad.write_text("Guarantee: x\nMutation: y\n\ndiff --git a/f b/f\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lacks Kills"):
        mutations.Mutant.read(bad)
