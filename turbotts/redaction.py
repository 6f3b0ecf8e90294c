"""What a log line may say about user text: a digest and a length, never the words.

Why a module of its own at the top of the package: the text front end and the
tokenizer log about the text they clean, and they must not import ``guard/`` or
``server/`` (layers above them). Everything that logs about a text, a voice
name, a path segment or an exception message goes through these few functions,
so the rule "digest and length only" lives in one place. The digest is the first
12 hex digits of SHA-256 over UTF-8, the same ``text_sha256`` that
:mod:`turbotts.guard.redact` puts in request lines, so an operator can still
match a complaint (whose text the user supplies) with its log lines.

Pure stdlib: no torch, no I/O.
"""

from __future__ import annotations

import hashlib
import traceback

DIGEST_HEX = 12


def text_sha256(text: str) -> str:
    """The first 12 hex digits of the SHA-256 of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_HEX]


def describe_text(text: str) -> str:
    """``"sha256:3f2a0c9d81be (42 chars)"``: all a log line may say about a text."""
    return f"sha256:{text_sha256(text)} ({len(text)} chars)"


def describe_exception(exc: BaseException) -> str:
    """``"ValueError: sha256:... (17 chars)"``: the type, and the message only as a digest.

    Why: messages are built from whatever the failing code held, user text included
    (``f"cannot read {text!r}"``); the type and the stack say where it failed.
    """
    return f"{type(exc).__qualname__}: {describe_text(str(exc))}"


def redacted_traceback(exc: BaseException) -> str:
    """A traceback like ``traceback.format_exception``, with every message (chained ones too) as a digest.

    The frames (file, line, function, source line) are kept: source code is not user text.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        block = "".join(traceback.format_tb(current.__traceback__))
        header = "Traceback (most recent call last):\n" if block else ""
        parts.append(f"{header}{block}{describe_exception(current)}")
        if current.__cause__ is not None:
            current, link = current.__cause__, "The above exception was the direct cause of the following exception:"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "During handling of the above exception, another exception occurred:"
        else:
            break
        parts.append(f"\n{link}\n\n")
    return "".join(reversed(parts))
