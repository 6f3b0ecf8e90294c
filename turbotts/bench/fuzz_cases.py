"""What the fuzzer sends: named malformed and valid HTTP requests and WebSocket scripts.

Fixed cases cover each kind of bad input once (truncated JSON, a wrong
Content-Type, huge numbers, NaN, invalid UTF-8, deep nesting, 10 MB bodies, wrong
methods, bad query strings, Unicode paths); :func:`mutated_body` adds random
mutations of a valid body. Every case says what a correct server answers: 2xx for
a valid one, a 4xx with a JSON error body for the rest. Protocol-level garbage is
answered by uvicorn itself (plain text), so those cases only require a 4xx.
"""

from __future__ import annotations

import functools
import json
import lzma
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from turbotts.bench.fuzz_client import ABORT, build_request

SPEECH = "/v1/audio/speech"
VOICES = "/v1/voices"
JSON_HEADERS = (("Content-Type", "application/json"),)
TEN_MB = 10 * 2**20


Expect = Literal["2xx", "4xx", "any"]


@dataclass(frozen=True)
class HttpCase:
    """One request as raw bytes, and what it must get (never a 5xx, whatever ``expect`` says)."""

    name: str
    request: bytes
    expect: Expect = "4xx"
    needs_json_error: bool = True  # a 4xx must be an OpenAI-shaped JSON error naming the problem

    def accepts(self, status: int) -> bool:
        """Whether ``status`` is what a correct server answers to this case."""
        if status >= 500:
            return False
        return self.expect == "any" or (200 <= status < 300) == (self.expect == "2xx")


@dataclass(frozen=True)
class WsCase:
    """One WebSocket script (text, binary or ``ABORT``) and the :attr:`WsOutcome.label` it must end with."""

    name: str
    script: tuple[str | bytes, ...]
    expect: str


def _http(
    name: str,
    method: str,
    target: str,
    body: bytes = b"",
    headers: tuple[tuple[str, str], ...] = JSON_HEADERS,
    expect: Expect = "4xx",
) -> HttpCase:
    return HttpCase(name, build_request(method, target, body, headers), expect)


def _speech(
    name: str, body: bytes | str, headers: tuple[tuple[str, str], ...] = JSON_HEADERS, expect: Expect = "4xx"
) -> HttpCase:
    raw = body.encode() if isinstance(body, str) else body
    return _http(name, "POST", SPEECH, raw, headers, expect)


def valid_speech_body(rng: random.Random, max_new_tokens: int = 4) -> dict[str, object]:
    """A request the server must answer with audio."""
    return {
        "input": rng.choice(["Hello there.", "How are you today?", "Fuzzing, one two three.", "你好，世界。"]),
        "voice": rng.choice(["alloy", "nova", "sage", {"id": "echo"}]),
        "response_format": rng.choice(["pcm", "wav", "mp3", "opus", "flac"]),
        "seed": rng.randrange(4),
        "max_new_tokens": max_new_tokens,
        "speed": rng.choice([1.0, 0.5, 2.0]),
    }


@functools.cache
def voice_bomb(num_mib: int = 64) -> str:
    """A short voice string (about 5.6 K characters for 64 MiB) that LZMA2 expands to ``num_mib`` MiB of zeros.

    Compressed at preset 0, which is fast; the voice decoder (preset 9, a larger dictionary) reads it all the same.
    """
    import pybase16384 as b14

    compressor = lzma.LZMACompressor(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "preset": 0}])
    chunks = [compressor.compress(bytes(2**20)) for _ in range(num_mib)]
    return str(b14.encode_to_string(b"".join(chunks) + compressor.flush()))


def _with(field: str) -> str:
    """A valid body plus one raw JSON member (numbers JSON cannot hold, NaN, ...)."""
    return '{"input": "hello", ' + field + "}"


def fixed_http_cases() -> list[HttpCase]:
    """One case per kind of malformed request (each must be a 4xx with a JSON error)."""
    nested = b"[" * 100_000 + b"]" * 100_000
    return [
        _speech("truncated_json", '{"input": "hel'),
        _speech("truncated_object", '{"input": "hello", "voice":'),
        _speech("not_json", "input=hello&voice=alloy"),
        _speech("empty_body", b""),
        _speech("json_array", "[1, 2, 3]"),
        _speech("json_null", "null"),
        _speech("json_string", '"hello"'),
        _speech("wrong_content_type", '{"input": "hello"}', headers=(("Content-Type", "text/plain"),)),
        _speech(
            "form_content_type", '{"input": "hi"}', headers=(("Content-Type", "application/x-www-form-urlencoded"),)
        ),
        _speech("no_content_type", "not json at all", headers=()),
        _speech("speed_1e308", _with('"speed": 1e308')),
        _speech("speed_negative_huge", _with('"speed": -1e308')),
        _speech("seed_10e400", _with(f'"seed": {10**400}')),
        _speech("seed_5000_digits", _with('"seed": ' + "9" * 5000)),
        _speech("max_new_tokens_huge", _with(f'"max_new_tokens": {10**400}')),
        _speech("speed_nan", _with('"speed": NaN')),
        _speech("temperature_infinity", _with('"temperature": Infinity')),
        _speech("top_p_minus_infinity", _with('"top_p": -Infinity')),
        _speech("float_overflow", _with('"speed": 1e999999')),
        _speech("invalid_utf8", b'{"input": "\xff\xfe\xc3\x28 hello"}'),
        _speech("overlong_utf8", b'{"input": "\xc0\xaf hello"}'),
        _speech("lone_surrogate_input", '{"input": "\\ud800 hello there"}'),
        _speech("lone_surrogate_voice", '{"input": "hello", "voice": "\\udfff"}'),
        _speech("lone_surrogate_instructions", '{"input": "hello", "instructions": "\\ud83d"}'),
        _speech("deeply_nested", b'{"input": ' + nested + b"}"),
        _speech("nested_800", '{"input": "hi", "voice": ' + "[" * 800 + "]" * 800 + "}"),
        _speech("ten_mb_input", b'{"input": "' + b"a" * TEN_MB + b'"}'),
        _speech("ten_mb_voice", b'{"input": "hi", "voice": "' + "乀".encode() * (TEN_MB // 3) + b'"}'),
        _speech("ten_mb_garbage", bytes(random.Random(0).randbytes(TEN_MB))),
        _speech("input_number", '{"input": 12345}'),
        _speech("input_object", '{"input": {"text": "hi"}}'),
        _speech("unknown_field", '{"input": "hi", "volume": 11}'),
        _speech("duplicate_keys", '{"input": "hi", "input": 5}'),
        _speech("bad_format", '{"input": "hi", "response_format": "ogg"}'),
        _speech("bad_voice_string", '{"input": "hi", "voice": "乀嗷会必裑磄圁什"}'),
        _speech("voice_lzma_bomb", json.dumps({"input": "hi", "voice": voice_bomb()})),
        _speech("unicode_voice_name", '{"input": "hi", "voice": "Ünïcødé-名前-😀"}'),
        _speech("nul_in_model", '{"input": "hi", "model": "tts-1\\u0000"}'),
        _speech("only_emoji", '{"input": "😀😀😀"}'),
        _http("put_speech", "PUT", SPEECH, b'{"input": "hi"}'),
        _http("delete_speech", "DELETE", SPEECH),
        _http("get_speech", "GET", SPEECH),
        _http("patch_voices", "PATCH", VOICES, b"{}"),
        _http("options_speech", "OPTIONS", SPEECH),
        # httptools >= 0.9 refuses a method it does not know while parsing: uvicorn's plain 400, never the app's
        HttpCase("made_up_method", build_request("BREW", SPEECH, b"", JSON_HEADERS), "4xx", needs_json_error=False),
        _http("post_healthz", "POST", "/healthz", b"{}"),
        _http("unknown_route", "GET", "/v1/nothing-here"),
        _http("bad_query_percent", "GET", VOICES + "?%ff%fe=%zz&&=&a=%00", expect="2xx"),  # no query parameters
        _http("huge_query", "GET", VOICES + "?" + "a=1&" * 2000, expect="2xx"),
        _http("query_on_post", "POST", SPEECH + "?input=%ff&voice=%E2%82", b'{"input": 1}'),
        _http("unicode_path_delete", "DELETE", VOICES + "/%F0%9F%98%80%FF%00"),
        _http("long_path_delete", "DELETE", VOICES + "/" + "a" * 5000),
        _http("traversal_delete", "DELETE", VOICES + "/..%2F..%2Fetc%2Fpasswd"),
        _http("unicode_route", "GET", "/v1/%E5%A3%B0%E9%9F%B3"),
        _http("voice_bad_name", "POST", VOICES, b'{"name": "bad name!", "seed": 1}'),
        _http("voice_unicode_name", "POST", VOICES, '{"name": "名前", "seed": 1}'.encode()),
        _http("voice_both", "POST", VOICES, b'{"name": "both", "seed": 1, "voice": "x"}'),
        _http("voice_seed_huge", "POST", VOICES, b'{"name": "huge", "seed": 1e308}'),
        _http("voice_builtin", "POST", VOICES, b'{"name": "alloy", "seed": 1}'),
        _http("delete_builtin", "DELETE", VOICES + "/alloy"),
        _http("bad_authorization", "GET", VOICES, headers=(("Authorization", "Bearer \u00e9\u00ff"),), expect="any"),
        _http("bad_request_id", "GET", "/healthz", headers=(("X-Request-ID", "\u00e9" * 300),), expect="2xx"),
        HttpCase("raw_byte_in_target", b"GET /v1/voices?a=\xff HTTP/1.1\r\nHost: x\r\n\r\n", needs_json_error=False),
        HttpCase(
            "garbage_request_line", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", needs_json_error=False
        ),
        HttpCase(
            "bad_content_length",
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
            needs_json_error=False,
        ),
    ]


def valid_http_case(rng: random.Random, index: int) -> HttpCase:
    """A request that must succeed: synthesis, voices, health, metrics."""
    kind = rng.choice(["speech", "speech", "speech", "list_voices", "create_voice", "healthz", "readyz", "metrics"])
    if kind == "speech":
        return _speech("valid_speech", json.dumps(valid_speech_body(rng)), expect="2xx")
    if kind == "create_voice":
        body = json.dumps({"name": f"fuzz-{index}-{rng.randrange(10**9)}", "seed": rng.randrange(2**63)})
        return _http("valid_create_voice", "POST", VOICES, body.encode(), expect="2xx")
    target = {"list_voices": VOICES, "healthz": "/healthz", "readyz": "/readyz", "metrics": "/metrics"}[kind]
    return _http(f"valid_{kind}", "GET", target, expect="2xx")


_WEIRD_VALUES: tuple[object, ...] = (
    None, True, -1, 0, 10**30, -(10**30), 1e308, -1e-308, "", " ", "\u0000", "😀" * 50, "\u202e\u200b",
    "[uv_break]" * 40, "a" * 5000, [], {}, [1, [2, [3]]], {"id": None}, "nova", "pcm",
)  # fmt: skip
_FIELDS = (
    "input", "voice", "model", "response_format", "speed", "instructions", "seed", "temperature", "top_p",
    "top_k", "repetition_penalty", "max_new_tokens", "refine_text", "stream_format", "extra",
)  # fmt: skip


def mutated_body(rng: random.Random) -> HttpCase:
    """A valid body with one to three fields replaced, removed or added (it may still be valid)."""
    body: dict[str, object] = dict(valid_speech_body(rng))
    for _ in range(rng.randint(1, 3)):
        field = rng.choice(_FIELDS)
        if rng.random() < 0.2:
            body.pop(field, None)
        else:
            body[field] = rng.choice(_WEIRD_VALUES)
    text = json.dumps(body, ensure_ascii=rng.random() < 0.5)
    if rng.random() < 0.2:  # cut it anywhere
        text = text[: rng.randrange(len(text))]
    return _speech("mutated_body", text, expect="any")


def random_bytes_case(rng: random.Random) -> HttpCase:
    return _speech("random_bytes", rng.randbytes(rng.choice([1, 16, 1024, 65536])))


def ws_config(response_format: str = "pcm", seed: int = 0, max_new_tokens: int = 4) -> str:
    """The first message of a valid session."""
    return json.dumps({"type": "config", "response_format": response_format, "seed": seed,
                       "max_new_tokens": max_new_tokens})  # fmt: skip


def _text(text: str) -> str:
    return json.dumps({"type": "text", "text": text})


END = json.dumps({"type": "end"})
BINARY = "ws_error_1003"  # an error message, then close 1003 (unsupported data)
BAD = "ws_error_1008"  # an error message, then close 1008 (policy violation)


def ws_cases(config: str) -> list[WsCase]:
    """One script per kind of bad WebSocket input, and valid sessions that start with ``config``."""
    return [
        WsCase("ws_valid", (config, _text("Hello th"), _text("ere. How are you?"), END), "ws_done"),
        WsCase("ws_valid_empty", (config, END), "ws_done"),
        WsCase("ws_after_end", (config, _text("Hi there."), END, _text("more"), "garbage", b"\x00"), "ws_done"),
        WsCase("ws_binary_first", (b"\x00\x01\x02",), BINARY),
        WsCase("ws_binary_later", (config, _text("Hello."), b"\xff" * 100), BINARY),
        WsCase("ws_not_json", ("hello",), BAD),
        WsCase("ws_not_json_later", (config, "{not json"), BAD),
        WsCase("ws_json_array", ("[1, 2, 3]",), BAD),
        WsCase("ws_json_number", ("42",), BAD),
        WsCase("ws_text_first", (_text("no config yet"),), BAD),
        WsCase("ws_unknown_type", (config, json.dumps({"type": "stop"})), BAD),
        WsCase("ws_text_not_string", (config, json.dumps({"type": "text", "text": ["a"]})), BAD),
        WsCase("ws_config_twice", (config, config), BAD),
        WsCase("ws_config_bad_speed", ('{"type": "config", "speed": 1e308}',), BAD),
        WsCase("ws_config_nan", ('{"type": "config", "temperature": NaN}',), BAD),
        WsCase("ws_config_unknown_voice", (json.dumps({"type": "config", "voice": "nobody-here"}),), BAD),
        WsCase("ws_lone_surrogate", (config, '{"type": "text", "text": "\\ud800"}'), BAD),
        WsCase("ws_deeply_nested", (config, "[" * 100_000), BAD),
        WsCase("ws_huge_text", (config, _text("a" * 200_000)), BAD),
        WsCase("ws_over_frame_limit", (config, "x" * (17 * 2**20)), "ws_closed_1009"),  # uvicorn's frame limit
        WsCase("ws_abort_after_config", (config, ABORT), "ws_aborted"),
        WsCase("ws_abort_mid_stream", (config, _text("Hello there. How are you today?"), END, ABORT), "ws_aborted"),
        WsCase("ws_abort_at_once", (ABORT,), "ws_aborted"),
    ]


def make_picker(
    rng: random.Random, ws_weight: float = 0.2, valid_weight: float = 0.25
) -> Callable[[int], HttpCase | WsCase]:
    """``pick(index)``: the next case of a mixed run (HTTP or WebSocket, valid or not)."""
    fixed = fixed_http_cases()
    scripts = [case for fmt in ("pcm", "wav", "mp3") for case in ws_cases(ws_config(fmt, seed=len(fmt)))]

    def pick(index: int) -> HttpCase | WsCase:
        roll = rng.random()
        if roll < ws_weight:
            return rng.choice(scripts)
        if roll < ws_weight + valid_weight:
            return valid_http_case(rng, index)
        roll = rng.random()
        if roll < 0.6:
            return rng.choice(fixed)
        if roll < 0.9:
            return mutated_body(rng)
        return random_bytes_case(rng)

    return pick
