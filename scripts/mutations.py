"""The mutation guard: every patch in tests/mutations/ must make the tests it names fail.

Why: a test that still passes with its feature removed guards nothing. Each patch breaks one guarantee
on purpose; the guard applies it to a temporary copy of the checkout, runs the named tests there with
this checkout's virtualenv, and counts the mutant killed only when pytest reports failing tests
(exit code 1). A patch that no longer applies, a test id that no longer exists, or a run that errors
is a failure of the guard, not a kill.

Usage: scripts/mutations.sh [NAME ...]   (names without .patch; none means all)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

REPO = Path(__file__).resolve().parents[1]
MUTATIONS = REPO / "tests" / "mutations"
MIN_MUTANTS = 10
HEADER_KEYS = ("Guarantee", "Mutation", "Kills")
#: pytest's exit code when tests ran and some failed: the only result that kills a mutant
PYTEST_TESTS_FAILED = 1
RUN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Mutant:
    """One patch file: what it breaks and which tests must notice."""

    name: str
    path: Path
    guarantee: str
    mutation: str
    kills: tuple[str, ...]

    @property
    def has_ray_cluster(self) -> bool:
        """Whether its tests start a whole Ray cluster, which wants both cores."""
        return any(test_id.startswith("tests/ray/") for test_id in self.kills)

    @classmethod
    def read(cls, path: Path) -> Mutant:
        header: dict[str, str] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("diff --git"):
                break
            key, sep, value = line.partition(":")
            if sep and key.strip() in HEADER_KEYS:
                header[key.strip()] = value.strip()
        missing = [key for key in HEADER_KEYS if not header.get(key)]
        if missing:
            raise ValueError(f"{path.name}: the header lacks {', '.join(missing)} (see tests/mutations/README.md)")
        return cls(path.stem, path, header["Guarantee"], header["Mutation"], tuple(header["Kills"].split()))


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    verdict: str  # "killed", "survived" or "error"
    detail: str
    seconds: float


def tracked_files() -> list[str]:
    """The checkout as git sees it, uncommitted edits and untracked files included (ignored ones are not)."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout  # fmt: skip
    return [name for name in listing.decode().split("\0") if name and (REPO / name).is_file()]


def copy_checkout(files: list[str], target: Path) -> None:
    for name in files:
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, destination)


def run_mutant(mutant: Mutant, files: list[str]) -> Outcome:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        copy = Path(tmp)
        copy_checkout(files, copy)
        applied = subprocess.run(["git", "apply", str(mutant.path)], cwd=copy, capture_output=True, text=True)
        if applied.returncode != 0:
            return Outcome(mutant, "error", f"the patch does not apply: {applied.stderr.strip()}", 0.0)
        env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                   "-o", "addopts=", *mutant.kills]  # fmt: skip
        try:
            result = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Outcome(mutant, "error", f"the tests ran past {RUN_TIMEOUT_S} s", time.monotonic() - started)
    seconds = time.monotonic() - started
    last_line = (result.stdout.strip().splitlines() or [""])[-1]
    # exit 1 also covers tests that only errored (a fixture that could not start): those prove nothing
    if result.returncode == PYTEST_TESTS_FAILED and re.search(r"\b\d+ failed\b", last_line):
        return Outcome(mutant, "killed", last_line, seconds)
    if result.returncode == 0:
        return Outcome(mutant, "survived", f"the named tests passed: {last_line}", seconds)
    tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
    return Outcome(mutant, "error", f"pytest exited {result.returncode}:\n{tail}", seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Apply each mutation patch and check its tests fail.")
    parser.add_argument("names", nargs="*", help="patch names (without .patch); all when none")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2, one per core here)")
    args = parser.parse_args(argv)
    console = Console(stderr=False, highlight=False)
    paths = sorted(MUTATIONS.glob("*.patch"))
    if args.names:
        unknown = sorted(set(args.names) - {p.stem for p in paths})
        if unknown:
            console.print(f"no such mutation: {', '.join(unknown)} (see {MUTATIONS.relative_to(REPO)})")
            return 2
        paths = [p for p in paths if p.stem in args.names]
    try:
        mutants = [Mutant.read(path) for path in paths]
    except ValueError as error:
        console.print(str(error))
        return 2
    files = tracked_files()
    outcomes: list[Outcome] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:  # fmt: skip
        task = progress.add_task("mutants", total=len(mutants))

        def report(outcome: Outcome) -> None:
            outcomes.append(outcome)
            progress.console.print(
                f"{outcome.verdict.upper():8} {outcome.mutant.name} ({outcome.seconds:.0f} s): {outcome.detail}"
            )
            progress.advance(task)

        # a mutant whose tests start a Ray cluster runs alone: two clusters on two cores time out
        alone = [m for m in mutants if m.has_ray_cluster]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_mutant, mutant, files) for mutant in mutants if mutant not in alone]
            for future in as_completed(futures):
                report(future.result())
        for mutant in alone:
            report(run_mutant(mutant, files))
    survived = [o for o in outcomes if o.verdict != "killed"]
    for outcome in survived:
        console.print(f"\n{outcome.verdict}: {outcome.mutant.name}\n  guarantee: {outcome.mutant.guarantee}\n"
                      f"  mutation: {outcome.mutant.mutation}\n  tests: {' '.join(outcome.mutant.kills)}")  # fmt: skip
    num_killed = len(outcomes) - len(survived)
    console.print(f"mutants: {num_killed} killed, {len(survived)} not killed, of {len(outcomes)}")
    if not args.names and len(outcomes) < MIN_MUTANTS:
        console.print(f"the guard needs at least {MIN_MUTANTS} mutants; tests/mutations/ has {len(outcomes)}")
        return 1
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
