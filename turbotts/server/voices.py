"""Named voices: OpenAI's built-in names plus voices users save, kept in SQLite.

A voice is either a seed (a voice drawn from the checkpoint's speaker
statistics, so it follows the checkpoint) or an explicit official voice string.
OpenAI's names map to fixed seeds, so unchanged OpenAI client code gets a
stable voice per name. Saved voices live in one SQLite file and survive restarts.
No FastAPI here.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from turbotts.errors import InvalidInputError, VoiceExistsError, VoiceNotFoundError

#: OpenAI voice name -> seed of a voice drawn from the speaker statistics.
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse", "marin", "cedar"
)
BUILTIN_VOICE_SEEDS: dict[str, int] = {name: 1000 + index for index, name in enumerate(OPENAI_VOICES)}
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class Voice:
    """One named voice: exactly one of ``seed`` and ``voice`` is set."""

    name: str
    seed: int | None
    voice: str | None
    is_builtin: bool
    created_at: float


_SCHEMA = """
CREATE TABLE IF NOT EXISTS voices (
    name TEXT PRIMARY KEY,
    seed INTEGER,
    voice TEXT,
    created_at REAL NOT NULL
)
"""


class VoiceStore:
    """Built-in voices plus saved ones in a SQLite file (``":memory:"`` for tests)."""

    def __init__(self, path: Path | str) -> None:
        if str(path) != ":memory:":
            path = Path(path).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        with self._lock, self._db:
            self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def list(self) -> list[Voice]:
        builtin = [Voice(name, seed, None, True, 0.0) for name, seed in BUILTIN_VOICE_SEEDS.items()]
        with self._lock:
            rows = self._db.execute("SELECT name, seed, voice, created_at FROM voices ORDER BY name").fetchall()
        return builtin + [Voice(name, seed, voice, False, created) for name, seed, voice, created in rows]

    def get(self, name: str) -> Voice:
        """Raises: VoiceNotFoundError."""
        if name in BUILTIN_VOICE_SEEDS:
            return Voice(name, BUILTIN_VOICE_SEEDS[name], None, True, 0.0)
        with self._lock:
            row = self._db.execute("SELECT seed, voice, created_at FROM voices WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise VoiceNotFoundError(
                f"voice {name[:MAX_NAME_CHARS]!r} does not exist; list voices with GET /v1/voices "
                "or create one with POST /v1/voices"
            )
        return Voice(name, row[0], row[1], False, row[2])

    def add(self, name: str, *, seed: int | None = None, voice: str | None = None) -> Voice:
        """Save a voice (the caller validated ``voice``). Raises: VoiceExistsError."""
        if name in BUILTIN_VOICE_SEEDS:
            raise VoiceExistsError(f"{name!r} is a built-in voice name; pick another name")
        created = time.time()
        try:
            with self._lock, self._db:
                self._db.execute(
                    "INSERT INTO voices (name, seed, voice, created_at) VALUES (?, ?, ?, ?)",
                    (name, seed, voice, created),
                )
        except sqlite3.IntegrityError as exc:
            raise VoiceExistsError(f"voice {name!r} already exists; delete it first or pick another name") from exc
        return Voice(name, seed, voice, False, created)

    def delete(self, name: str) -> None:
        """Raises: VoiceNotFoundError (built-in voices cannot be deleted either)."""
        if name in BUILTIN_VOICE_SEEDS:
            raise InvalidInputError(f"{name!r} is a built-in voice and cannot be deleted")
        with self._lock, self._db:
            deleted = self._db.execute("DELETE FROM voices WHERE name = ?", (name,)).rowcount
        if not deleted:
            raise VoiceNotFoundError(f"voice {name[:MAX_NAME_CHARS]!r} does not exist; nothing was deleted")
