"""Named voices: OpenAI's built-in names plus voices users save, kept in SQLite.

A voice is a seed (a voice drawn from the checkpoint's speaker statistics, so it
follows the checkpoint), an explicit official voice string, a reference clip's
audio codes with its transcript (zero-shot), or a mix of other voices.
OpenAI's names map to fixed seeds, so unchanged OpenAI client code gets a
stable voice per name. Saved voices live in one SQLite file and survive restarts.
No FastAPI here.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from turbotts.errors import InvalidInputError, VoiceExistsError, VoiceNotFoundError

#: OpenAI voice name -> seed of a voice drawn from the speaker statistics.
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "fable",
    "onyx",
    "nova",
    "sage",
    "shimmer",
    "verse",
    "marin",
    "cedar",
)
BUILTIN_VOICE_SEEDS: dict[str, int] = {name: 1000 + index for index, name in enumerate(OPENAI_VOICES)}
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class Voice:
    """One named voice, of one kind (see :attr:`kind`).

    seed: drawn from the checkpoint's speaker statistics. voice: an official voice string.
    reference: a clip's audio codes (``spk_smp``) with its ``transcript``; the clip itself
    only when it was kept. mix: a voice mix expression (``alloy*0.7+nova*0.3``),
    resolved when used so its seed voices follow the checkpoint. consent: the uploader's
    consent statement, kept for the record and never shown.
    """

    name: str
    seed: int | None
    voice: str | None
    is_builtin: bool
    created_at: float
    spk_smp: str | None = None
    transcript: str | None = None
    has_audio: bool = False
    mix: str | None = None
    consent: str | None = field(default=None, repr=False)  # never in a repr, a log line or a listing

    @property
    def kind(self) -> str:
        if self.spk_smp is not None:
            return "reference"
        if self.mix is not None:
            return "mix"
        return "seed" if self.seed is not None else "voice"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS voices (
    name TEXT PRIMARY KEY,
    seed INTEGER,
    voice TEXT,
    created_at REAL NOT NULL
)
"""
#: Columns added after the first release; an older file gains them when opened.
_ADDED_COLUMNS = {"spk_smp": "TEXT", "transcript": "TEXT", "audio": "BLOB", "mix": "TEXT", "consent": "TEXT"}
_COLUMNS = "name, seed, voice, created_at, spk_smp, transcript, audio IS NOT NULL, mix, consent"


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
            present = {row[1] for row in self._db.execute("PRAGMA table_info(voices)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in present:
                    self._db.execute(f"ALTER TABLE voices ADD COLUMN {column} {kind}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def list(self) -> list[Voice]:
        builtin = [Voice(name, seed, None, True, 0.0) for name, seed in BUILTIN_VOICE_SEEDS.items()]
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM voices ORDER BY name").fetchall()
        return builtin + [_voice(row) for row in rows]

    def get(self, name: str) -> Voice:
        """Raises: VoiceNotFoundError."""
        if name in BUILTIN_VOICE_SEEDS:
            return Voice(name, BUILTIN_VOICE_SEEDS[name], None, True, 0.0)
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM voices WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise VoiceNotFoundError(
                f"voice {name[:MAX_NAME_CHARS]!r} does not exist; list voices with GET /v1/voices "
                "or create one with POST /v1/voices"
            )
        return _voice(row)

    def audio(self, name: str) -> bytes | None:
        """The kept reference clip of a saved voice (``keep_audio=true``), or None."""
        with self._lock:
            row = self._db.execute("SELECT audio FROM voices WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def ensure_free(self, name: str) -> None:
        """Raises: VoiceExistsError when ``name`` is built in or saved (checked before costly work)."""
        if name in BUILTIN_VOICE_SEEDS:
            raise VoiceExistsError(f"{name!r} is a built-in voice name; pick another name")
        with self._lock:
            row = self._db.execute("SELECT 1 FROM voices WHERE name = ?", (name,)).fetchone()
        if row is not None:
            raise VoiceExistsError(f"voice {name!r} already exists; delete it first or pick another name")

    def add(
        self, name: str, *, seed: int | None = None, voice: str | None = None, spk_smp: str | None = None,
        transcript: str | None = None, audio: bytes | None = None, mix: str | None = None,
        consent: str | None = None,
    ) -> Voice:  # fmt: skip
        """Save a voice (the caller validated it). Raises: VoiceExistsError."""
        if name in BUILTIN_VOICE_SEEDS:
            raise VoiceExistsError(f"{name!r} is a built-in voice name; pick another name")
        created = time.time()
        try:
            with self._lock, self._db:
                self._db.execute(
                    "INSERT INTO voices (name, seed, voice, created_at, spk_smp, transcript, audio, mix, consent) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (name, seed, voice, created, spk_smp, transcript, audio, mix, consent),
                )
        except sqlite3.IntegrityError as exc:
            raise VoiceExistsError(f"voice {name!r} already exists; delete it first or pick another name") from exc
        return Voice(name, seed, voice, False, created, spk_smp, transcript, audio is not None, mix, consent)

    def delete(self, name: str) -> None:
        """Raises: VoiceNotFoundError (built-in voices cannot be deleted either)."""
        if name in BUILTIN_VOICE_SEEDS:
            raise InvalidInputError(f"{name!r} is a built-in voice and cannot be deleted")
        with self._lock, self._db:
            deleted = self._db.execute("DELETE FROM voices WHERE name = ?", (name,)).rowcount
        if not deleted:
            raise VoiceNotFoundError(f"voice {name[:MAX_NAME_CHARS]!r} does not exist; nothing was deleted")


def _voice(row: tuple[object, ...]) -> Voice:
    name, seed, voice, created, spk_smp, transcript, has_audio, mix, consent = row
    return Voice(
        str(name), seed if isinstance(seed, int) else None, voice if isinstance(voice, str) else None, False,
        float(created),  # type: ignore[arg-type]
        spk_smp if isinstance(spk_smp, str) else None, transcript if isinstance(transcript, str) else None,
        bool(has_audio), mix if isinstance(mix, str) else None, consent if isinstance(consent, str) else None,
    )  # fmt: skip
