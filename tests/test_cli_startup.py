"""The ``turbotts`` command line starts without torch: help, usage errors and the commands that need no model
(loadtest, fuzz, watermark, seal) answer in a fraction of a second instead of paying torch's import first."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.required_tools import REPO

#: what only a command that runs the model (or serves, or plots) may load
HEAVY_MODULES = ("torch", "inflect", "fastapi", "matplotlib", "onnxruntime", "soundfile")


def _loaded_after(code: str) -> list[str]:
    probe = (
        f"import sys\n{code}\nimport json; print(json.dumps(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout.splitlines()[-1]))


def test_importing_the_cli_with_every_command_loads_none_of_the_heavy_modules() -> None:
    assert _loaded_after("import turbotts.cli") == []


def test_help_and_a_usage_error_load_none_of_them() -> None:
    runs = (
        "from turbotts.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass",
        "from turbotts.cli import app\ntry:\n    app(['bench', '--mode', 'nonsense', '--concurrency', '1'])\n"
        "except SystemExit as exit:\n    assert exit.code == 2, exit.code",
    )
    for code in runs:
        assert _loaded_after(code) == []
