"""``inflect`` imported without typeguard's import-time instrumentation: 2 s less for every process.

inflect 7 wraps some twenty methods in typeguard's ``@typechecked``, which re-parses and
compiles inflect's whole 4,000-line module once per method when it is imported: about
2.2 s on a 2-core Zen 4 box, paid by every ``turbotts`` command, server start and test
worker (upstream: jaraco/inflect#212, agronholm/typeguard#468). The checks guard calls
from untyped code; ours pass digit strings we cut ourselves. So inflect is imported with
an identity decorator in typeguard's place, and typeguard is put back at once.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


def _identity(target: Any = None, **_options: Any) -> Any:
    """``typechecked`` as a no-op, in both its forms (``@typechecked`` and ``@typechecked(...)``)."""
    if target is None:
        return lambda inner: inner
    return target


def import_inflect() -> types.ModuleType:
    """The ``inflect`` module, imported with ``@typechecked`` as a no-op unless something imported it first."""
    if "inflect" in sys.modules:
        return sys.modules["inflect"]
    stand_in = types.ModuleType("typeguard")
    stand_in.typechecked = _identity  # type: ignore[attr-defined]
    previous = sys.modules.get("typeguard")
    sys.modules["typeguard"] = stand_in
    try:
        import inflect
    finally:
        if previous is None:
            del sys.modules["typeguard"]
        else:
            sys.modules["typeguard"] = previous
    return inflect


def number_to_words_engine() -> Callable[..., Any]:
    """A fresh ``inflect.engine()``."""
    return import_inflect().engine()
