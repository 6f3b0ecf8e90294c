"""Run the ``turbotts`` command in this process, as ``python -m turbotts`` would run it.

Why: a subprocess spends seconds importing torch before the command starts, and most CLI
tests check a contract (files written, exit code 2 with a message) that does not depend on
the process boundary. Each command keeps one subprocess test (:func:`run_subprocess`) that
proves the real entry point works; the rest run here through :func:`run_cli`.

What a real run has that a test process may not, and is set up here for the call only:
- ``turbotts.cli.main`` itself, so our errors become exit code 2 with ``error: ...`` on stderr;
- an uncaught exception prints its traceback on stderr and exits 1, as the interpreter does;
- log records on stderr at INFO (``main`` configures logging only when nothing else has);
- no Hugging Face hub and no default weights (``HF_HUB_OFFLINE=1``, an empty ``TURBOTTS_HOME``);
- ``sys.argv``, the environment (plus ``env``), the root logger and torch's thread count as
  they were before, whatever the command changed.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
from click.testing import CliRunner

from turbotts.cli import main

NO_HOME = Path("/nonexistent-turbotts-home")
SUBPROCESS_ENV = {"HF_HUB_OFFLINE": "1", "TURBOTTS_HOME": str(NO_HOME)}
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # as turbotts.cli.main


@dataclass(frozen=True)
class CliRun:
    """What a run of the command left behind (the fields of ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: Mapping[str, str] | None = None) -> CliRun:
    """``turbotts ARGS`` in this process; ``env`` is added to the environment for the call."""
    runner = CliRunner()
    with _offline(), runner.isolation(env=env) as (stdout, stderr, _), _restored_process_state():
        handler = logging.StreamHandler(sys.stderr)  # the isolated stderr
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        sys.argv = ["turbotts", *args]
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except Exception:  # noqa: BLE001 - what the interpreter does with an uncaught exception
            traceback.print_exc(file=sys.stderr)
            code = 1
        finally:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        return CliRun(code, _text(stdout.getvalue()), _text(stderr.getvalue()))


def run_subprocess(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m turbotts ARGS`` in a fresh interpreter (the real entry point), with ``env`` added.

    It gets this process's torch thread count (unless OMP_NUM_THREADS is set), so a test session that
    limits threads on a shared machine limits its subprocesses too.
    """
    threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(torch.get_num_threads()))}
    full_env = {**os.environ, **threads, **SUBPROCESS_ENV, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "turbotts", *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # sys.exit("message"): printed, exit status 1
    return 1


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


@contextmanager
def _offline() -> Iterator[None]:
    """No hub and no default weights, as ``SUBPROCESS_ENV`` gives a subprocess (both are read at import)."""
    import huggingface_hub.constants

    with (
        mock.patch.object(huggingface_hub.constants, "HF_HUB_OFFLINE", True),
        mock.patch("turbotts.model.download.DEFAULT_DIR", NO_HOME / "ChatTTS"),
    ):
        yield


@contextmanager
def _restored_process_state() -> Iterator[None]:
    """Put back what a command may change for the rest of its process."""
    argv, environ = list(sys.argv), dict(os.environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    num_threads = torch.get_num_threads()
    try:
        yield
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
        root.handlers[:] = handlers
        root.setLevel(level)
        torch.set_num_threads(num_threads)
