"""The ``turbotts`` command line.

User mistakes (bad flags, missing weights, bad voice strings) print one clear
message and exit with code 2; they never end in a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from turbotts.cli_options import CheckpointOpt, DeviceOpt, DtypeOpt, DummySizeOpt, LoadFormatOpt, QuantOpt
from turbotts.errors import TurboTTSError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help="TurboTTS: serve ChatTTS fast."
)
voices_app = typer.Typer(no_args_is_help=True, help="Voice (speaker) strings.")
app.add_typer(voices_app, name="voices")

F = TypeVar("F", bound=Callable[..., Any])
USAGE_ERROR = 2


def fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(USAGE_ERROR)


def _model_source(checkpoint: Path | None, load_format: str, dummy_size: str) -> Any:
    from turbotts.model.loader import ModelSource

    return ModelSource(checkpoint=checkpoint, load_format=load_format, dummy_size=dummy_size)


@app.command()
def download(
    dir: Annotated[
        Path | None, typer.Option("--dir", help="Target directory (default ~/.cache/turbotts/ChatTTS).")
    ] = None,
) -> None:
    """Fetch the official 2Noise/ChatTTS weights from the Hugging Face hub and verify them."""
    from turbotts.model.download import download_official

    checkpoint = download_official(dir)
    typer.echo(f"official weights ready in {checkpoint.root}")


@app.command("init-checkpoint")
def init_checkpoint(
    dir: Annotated[Path, typer.Argument(help="Where to write the checkpoint.")],
    size: Annotated[str, typer.Option("--size", help="tiny (tests) or full (official dimensions).")] = "tiny",
    seed: Annotated[int, typer.Option("--seed", help="Weights are a pure function of this seed.")] = 0,
) -> None:
    """Write deterministic random weights in the official layout."""
    from turbotts.model.dummy import SIZES, write_dummy_checkpoint

    if size not in SIZES:
        raise fail(f"--size must be one of {', '.join(SIZES)}, not {size!r}")
    root = write_dummy_checkpoint(dir, size=size, seed=seed)
    typer.echo(f"wrote a {size} random checkpoint (seed {seed}) to {root}")


@app.command()
def say(
    text: Annotated[str, typer.Argument(help="What to say (control tokens like [uv_break] pass through).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="WAV file to write (24 kHz).")] = Path("out.wav"),
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "auto",
    dummy_size: DummySizeOpt = "tiny",
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
    quant: QuantOpt = "none",
    voice: Annotated[str | None, typer.Option("--voice", help="Official voice string.")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Random voice from this seed; also seeds sampling.")
    ] = None,
    greedy: Annotated[bool, typer.Option("--greedy", help="Argmax decoding (the official greedy result).")] = False,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.3,
    top_p: Annotated[float, typer.Option("--top-p")] = 0.7,
    top_k: Annotated[int, typer.Option("--top-k")] = 20,
    repetition_penalty: Annotated[float, typer.Option("--repetition-penalty")] = 1.05,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 2048,
    skip_refine: Annotated[bool, typer.Option("--skip-refine", help="Skip the refine-text stage.")] = False,
    no_normalize: Annotated[bool, typer.Option("--no-normalize", help="Skip number/symbol normalization.")] = False,
) -> None:
    """Synthesize TEXT into a 24 kHz WAV file."""
    from dataclasses import replace

    import soundfile as sf

    from turbotts.api import TTS
    from turbotts.params import SamplingParams, SynthesisParams, default_refine_params

    code = SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        repetition_penalty=repetition_penalty,
        max_new_tokens=max_new_tokens,
        greedy=greedy,
    )
    refine = replace(default_refine_params(), greedy=greedy)
    params = SynthesisParams(
        code=code,
        refine=refine,
        voice=voice,
        voice_seed=seed if voice is None else None,
        seed=seed,
        refine_text=not skip_refine,
        normalize_text=not no_normalize,
    )
    tts = TTS.load(_model_source(checkpoint, load_format, dummy_size), device=device, dtype=dtype, quant=quant)
    wav = tts.synthesize([text], params)[0]
    output.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(output), wav, tts.sample_rate_hz, subtype="PCM_16")
    typer.echo(f"wrote {output} ({len(wav) / tts.sample_rate_hz:.2f} s at {tts.sample_rate_hz} Hz)")


@voices_app.command("random")
def voices_random(
    seed: Annotated[int, typer.Option("--seed", help="The same seed gives the same voice.")] = 0,
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "auto",
    dummy_size: DummySizeOpt = "tiny",
) -> None:
    """Print a random voice string drawn from the speaker statistics.

    Without --checkpoint or dummy weights it uses the official statistics (768 wide).
    """
    from turbotts.model.loader import speaker_stats_for
    from turbotts.model.speaker import encode_voice, sample_random_voice

    stats = speaker_stats_for(_model_source(checkpoint, load_format, dummy_size))
    typer.echo(encode_voice(sample_random_voice(stats, seed)))


watermark_app = typer.Typer(no_args_is_help=True, help="Audio watermarks.")
app.add_typer(watermark_app, name="watermark")


@app.command()
def seal(
    checkpoint: Annotated[Path, typer.Argument(help="Plain checkpoint directory.")],
    out: Annotated[Path, typer.Argument(help="Where to write the sealed checkpoint.")],
    key_env: Annotated[str, typer.Option("--key-env", help="Env var with the 32-byte AES key (hex or base64).")],
    signing_key: Annotated[Path, typer.Option("--signing-key", help="Ed25519 PEM; created if missing.")] = Path(
        "turbotts-signing.pem"
    ),
) -> None:
    """Encrypt a checkpoint (AES-256-GCM) and sign its manifest (Ed25519)."""
    from turbotts.guard.seal import seal_command

    raise typer.Exit(seal_command(checkpoint, out, key_env, signing_key))


@watermark_app.command("detect")
def watermark_detect(
    file: Annotated[Path, typer.Argument(help="Audio file (wav, flac, mp3, opus, aac).")],
    key_env: Annotated[str, typer.Option("--key-env", help="Env var with the watermark key.")] = (
        "TURBOTTS_WATERMARK_KEY"
    ),
) -> None:
    """Recover the watermark payload (key id, time, request hash) from an audio file."""
    from turbotts.guard.seal import aes_key_from_env
    from turbotts.guard.watermark_cli import watermark_detect_command

    raise typer.Exit(watermark_detect_command(str(file), aes_key_from_env(key_env)))


def _register_commands() -> None:
    """Commands that live in their own modules (kept out of this file to stay small)."""
    from turbotts.bench.command import bench
    from turbotts.bench.fuzz_command import fuzz
    from turbotts.quality.check import quality_app
    from turbotts.quality.sweep import quant_sweep

    app.command("bench")(bench)
    app.command("fuzz")(fuzz)
    app.command("quant-sweep")(quant_sweep)
    app.add_typer(quality_app, name="quality")


_register_commands()


class _StartupTracebackFilter(logging.Filter):
    """Drops uvicorn's traceback for start-up errors of our own: serve prints their message instead."""

    def __init__(self, server_app: Any) -> None:
        super().__init__()
        self.server_app = server_app

    def filter(self, record: logging.LogRecord) -> bool:
        is_ours = isinstance(self.server_app.state.startup_error, TurboTTSError)
        return not (is_ours and str(record.msg).startswith("Traceback"))


@app.command()
def serve(
    checkpoint: CheckpointOpt = None,
    load_format: Annotated[
        str | None, typer.Option("--load-format", help="auto: --checkpoint or the official weights; dummy: random.")
    ] = None,
    dummy_size: Annotated[str | None, typer.Option("--dummy-size", help="Size of dummy weights: tiny or full.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda or cuda:N.")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="GPT weight precision: fp32, bf16 or fp16.")] = None,
    quant: Annotated[str | None, typer.Option("--quant", help="GPT weight quantization: none or int8.")] = None,
    vocoder_dtype: Annotated[str | None, typer.Option("--vocoder-dtype", help="Decoder/Vocos: fp32 or bf16.")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Interface to listen on (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="TCP port (default 8000).")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML, JSON or TOML settings file (keys as TURBOTTS_* names).")
    ] = None,
    redis_url: Annotated[
        str | None, typer.Option("--redis-url", help="Redis for the shared L2 cache and rate limits (default: none).")
    ] = None,
    rate_limit_rps: Annotated[
        float | None, typer.Option("--rate-limit-rps", help="Requests per second per client IP and API key; 0 = off.")
    ] = None,
    rate_limit_burst: Annotated[int | None, typer.Option("--rate-limit-burst", help="Token bucket size.")] = None,
    api_key_file: Annotated[
        Path | None, typer.Option("--api-key-file", help="Bearer keys, one per line (also TURBOTTS_API_KEYS).")
    ] = None,
    blocklist: Annotated[
        Path | None, typer.Option("--blocklist", help="Blocked terms, one per line; SIGHUP reloads it.")
    ] = None,
    no_watermark: Annotated[bool, typer.Option("--no-watermark", help="Do not watermark synthesized audio.")] = False,
    cache_max_bytes: Annotated[int | None, typer.Option("--cache-max-bytes", help="L1 cache budget; 0 = off.")] = None,
    degrade_mode: Annotated[
        str | None, typer.Option("--degrade-mode", help="When the TTFA SLO breaks: off, shed or fallback.")
    ] = None,
    fallback_clip: Annotated[
        Path | None, typer.Option("--fallback-clip", help="Audio file answered in --degrade-mode fallback.")
    ] = None,
    log_format: Annotated[str | None, typer.Option("--log-format", help="json (default) or text.")] = None,
) -> None:
    """Serve the OpenAI-compatible speech API (flags > TURBOTTS_* environment > --config file > defaults)."""
    import uvicorn
    from pydantic import ValidationError

    from turbotts.server.app import create_app
    from turbotts.server.context import configure_logging
    from turbotts.server.settings import ServerSettings

    flags: dict[str, Any] = {
        "checkpoint": checkpoint, "load_format": load_format, "dummy_size": dummy_size, "device": device,
        "dtype": dtype, "quant": quant, "vocoder_dtype": vocoder_dtype, "host": host, "port": port,
        "config_file": config, "redis_url": redis_url,
        "rate_limit_rps": rate_limit_rps, "rate_limit_burst": rate_limit_burst, "api_key_file": api_key_file,
        "blocklist": blocklist, "watermark": False if no_watermark else None, "cache_max_bytes": cache_max_bytes,
        "degrade_mode": degrade_mode, "fallback_clip": fallback_clip, "log_format": log_format,
    }  # fmt: skip
    try:
        settings = ServerSettings(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise fail(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from exc
    configure_logging(settings.log_level, settings.log_format)
    server_app = create_app(settings)
    from turbotts.server.drain import DrainingServer

    server = DrainingServer(
        uvicorn.Config(
            server_app,
            host=settings.host,
            port=settings.port,
            lifespan="on",
            ws="websockets-sansio",
            log_level=settings.log_level,
            log_config=None,  # uvicorn's records go to our (redacted, request-id) root handlers
            timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
        ),
        server_app,
        settings.shutdown_grace_s,
    )
    logging.getLogger("uvicorn.error").addFilter(_StartupTracebackFilter(server_app))
    with contextlib.suppress(SystemExit):  # uvicorn exits 3 when start-up fails; we report it below
        server.run()
    error = server_app.state.startup_error
    if error is not None:
        raise fail(str(error) if isinstance(error, TurboTTSError) else f"start-up failed: {error!r}")
    if not server.started:
        raise fail(f"the server did not start (is {settings.host}:{settings.port} free?)")


def main() -> None:
    """Entry point: run the app, turning our own errors into exit code 2."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        app()
    except TurboTTSError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(USAGE_ERROR)
