"""Without an optional package, each command names what to install in one line and exits 2.

The package is hidden from a real ``turbotts`` subprocess by a meta-path finder, as if the
extra had never been installed (the packages themselves stay installed for the other tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.golden import FIXTURE_DIR

HIDE_AND_RUN = """
import sys
hidden = set(sys.argv[1].split(","))

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
sys.argv = ["turbotts", *sys.argv[2:]]
from turbotts.cli import main
main()
"""
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "SEAL_KEY": "5a" * 32}


def run_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_AND_RUN, modules, *args], capture_output=True, text=True, timeout=300, env=ENV
    )


@pytest.mark.parametrize(
    ("hidden", "args", "names"),
    [
        ("uvicorn", ("serve", "--load-format", "dummy"), "turbotts serve needs uvicorn"),
        ("fastapi", ("serve", "--load-format", "dummy"), "turbotts serve needs fastapi"),
        ("prometheus_client", ("serve", "--load-format", "dummy"), "turbotts serve needs prometheus-client"),
        ("cryptography", ("seal", str(FIXTURE_DIR), "OUT", "--key-env", "SEAL_KEY"),
         "turbotts seal needs cryptography"),
        ("cryptography", ("sign", "CKPT"), "turbotts sign needs cryptography"),
        ("av", ("watermark", "detect", "x.mp3"), "turbotts watermark detect needs av"),
        ("matplotlib", ("bench", "--load-format", "dummy", "--plot", "PLOT"), "--plot needs matplotlib"),
        # found late (the loader opens a sealed checkpoint): the same one line
        ("cryptography", ("say", "hi", "-o", "OUT", "--checkpoint", "SEALED", "--key-env", "SEAL_KEY",
                          "--public-key", "PUB"), "turbotts say needs cryptography"),
    ],
)  # fmt: skip
def test_missing_optional_dependency_is_one_line_and_exit_2(
    tmp_path: Path, hidden: str, args: tuple[str, ...], names: str
) -> None:
    sealed = tmp_path / "sealed"
    sealed.mkdir()
    (sealed / "manifest.json").write_text('{"format": "turbotts-sealed-v1"}')
    paths = {"OUT": str(tmp_path / "out"), "CKPT": str(tmp_path), "PLOT": str(tmp_path / "p.png"),
             "SEALED": str(sealed), "PUB": str(tmp_path / "k.pub")}  # fmt: skip
    result = run_without(hidden, *[paths.get(a, a) for a in args])
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: {names}, which is not installed: pip install 'turbotts[server]'"], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.png").exists()


def test_an_unknown_missing_module_is_not_disguised() -> None:
    """Only optional packages get the install hint: a missing core module still shows its traceback."""
    result = run_without("numpy", "voices", "random")
    assert result.returncode == 1
    assert "ModuleNotFoundError" in result.stderr and "turbotts[" not in result.stderr
