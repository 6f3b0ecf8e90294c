"""inflect without typeguard's instrumentation says what inflect says, and leaves typeguard as it found it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.required_tools import REPO

#: what our normalizer asks of inflect: cardinals (with and without "and"), single digits, ordinals, plurals
CALLS = """
words = [engine.number_to_words(str(n), andword="") for n in [*range(0, 2100, 7), 10**9 + 7, 123456789]]
words += [engine.number_to_words(d) for d in "0123456789"]
words += [engine.ordinal(engine.number_to_words(str(n))) for n in range(1, 40)]
words += [engine.plural(unit, n) for unit in ("dollar", "cent", "kilometre", "inch") for n in (1, 2)]
"""


def _words(setup: str) -> list[str]:
    code = f"{textwrap.dedent(setup)}\n{CALLS}\nimport json; print(json.dumps(words))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def test_the_uninstrumented_engine_says_what_inflect_says() -> None:
    ours = _words("from turbotts.text.inflect_engine import number_to_words_engine; engine = number_to_words_engine()")
    theirs = _words("import inflect; engine = inflect.engine()")
    assert ours == theirs and len(ours) > 350


def test_typeguard_is_put_back_as_it_was() -> None:
    import typeguard

    from turbotts.text.inflect_engine import import_inflect

    sys.modules.pop("inflect", None)
    before = sys.modules["typeguard"]
    inflect = import_inflect()
    assert sys.modules["typeguard"] is before is typeguard
    assert inflect.engine().number_to_words("21") == "twenty-one"


def test_without_typeguard_loaded_none_is_left_behind() -> None:
    code = (
        "import sys; from turbotts.text.inflect_engine import import_inflect; import_inflect(); "
        "print('typeguard' in sys.modules, 'inflect' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["False", "True"], result.stderr
