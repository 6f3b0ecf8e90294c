"""The ``turbotts`` command line.

User mistakes (bad flags, missing weights, bad voice strings) print one clear
message and exit with code 2; they never end in a traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from turbotts.cli_options import (
    USAGE_ERROR,
    CheckpointOpt,
    DeviceOpt,
    DtypeOpt,
    DummySizeOpt,
    KeyEnvOpt,
    LoadFormatOpt,
    PublicKeyOpt,
    QuantOpt,
    fail,
    model_source,
)
from turbotts.errors import TurboTTSError
from turbotts.optional import explain_missing, require

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help="TurboTTS: serve ChatTTS fast."
)
voices_app = typer.Typer(no_args_is_help=True, help="Voice (speaker) strings.")
app.add_typer(voices_app, name="voices")

F = TypeVar("F", bound=Callable[..., Any])


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
    text: Annotated[
        str,
        typer.Argument(help="What to say (control tokens like [uv_break] pass through; <speak> or <?xml: SSML)."),
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="WAV file to write (24 kHz).")] = Path("out.wav"),
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "auto",
    dummy_size: DummySizeOpt = "tiny",
    key_env: KeyEnvOpt = None,
    public_key: PublicKeyOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    quant: QuantOpt = "auto",
    vocoder_dtype: Annotated[
        str,
        typer.Option(
            "--vocoder-dtype",
            help="Decoder/Vocos: auto (bf16 where faster and it passes the quality gate), fp32 or bf16.",
        ),
    ] = "auto",
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
    reference: Annotated[
        Path | None, typer.Option("--reference", help="Clip to speak like (wav, flac, mp3, ogg, m4a; 1-30 s).")
    ] = None,
    reference_text: Annotated[str | None, typer.Option("--reference-text", help="What the clip says.")] = None,
    captions: Annotated[
        Path | None,
        typer.Option("--captions", help="Also write captions, one cue per segment: out.vtt (WebVTT) or out.srt."),
    ] = None,
) -> None:
    """Synthesize TEXT (plain or SSML, <speak>...</speak>) into a 24 kHz WAV file.

    With --reference, in the voice of that clip. With --captions, or for SSML,
    segment by segment as the server does.
    """
    import soundfile as sf

    from turbotts.api import TTS
    from turbotts.params import SynthesisParams, user_sampling

    clip = _read_clip(reference, reference_text, "--reference", "--reference-text")

    code, refine = user_sampling(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        repetition_penalty=repetition_penalty,
        greedy=greedy,
    )
    params = SynthesisParams(
        code=code,
        refine=refine,
        voice=voice,
        voice_seed=seed if voice is None and clip is None else None,  # with a clip, the seed seeds sampling only
        seed=seed,
        refine_text=not skip_refine,
        normalize_text=not no_normalize,
    )
    items = _say_segments(text, captions)  # None: plain text, one request
    source = model_source(checkpoint, load_format, dummy_size, key_env, public_key)
    tts = TTS.load(source, device=device, dtype=dtype, quant=quant, vocoder_dtype=vocoder_dtype)
    if clip is not None:
        params = replace(params, reference=tts.reference_from_clip(clip, reference_text or ""))
    if items is None:
        wav = tts.synthesize_long(text, params)  # long text: segments, one speaker throughout
    else:
        from turbotts.say_captions import say_with_captions

        wav = say_with_captions(tts, items, params, captions)
    output.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(output), wav, tts.sample_rate_hz, subtype="PCM_16")
    typer.echo(f"wrote {output} ({len(wav) / tts.sample_rate_hz:.2f} s at {tts.sample_rate_hz} Hz)")
    if captions is not None:
        typer.echo(f"wrote {captions}")


def _say_segments(text: str, captions: Path | None) -> list[Any] | None:
    """Segments and pauses when ``say`` needs them (captions, or SSML), checked before the model loads."""
    from turbotts.text.ssml import is_ssml

    if captions is None and not is_ssml(text):
        return None
    from turbotts.server.audio.subtitles import check_caption_path
    from turbotts.text.segmenter import split_input

    if captions is not None:
        check_caption_path(captions)
    return split_input(text)


@voices_app.command("random")
def voices_random(
    seed: Annotated[int, typer.Option("--seed", help="The same seed gives the same voice.")] = 0,
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "auto",
    dummy_size: DummySizeOpt = "tiny",
    key_env: KeyEnvOpt = None,
    public_key: PublicKeyOpt = None,
) -> None:
    """Print a random voice string drawn from the speaker statistics.

    Without --checkpoint or dummy weights it uses the official statistics (768 wide).
    """
    from turbotts.model.speaker import encode_voice, sample_random_voice
    from turbotts.sources import speaker_stats_for

    stats = speaker_stats_for(model_source(checkpoint, load_format, dummy_size, key_env, public_key))
    typer.echo(encode_voice(sample_random_voice(stats, seed)))


def _read_clip(path: Path | None, transcript: str | None, path_flag: str, text_flag: str) -> bytes | None:
    """The bytes of a reference clip, or None; a missing file or transcript is a usage error (exit 2)."""
    if path is None:
        if transcript is not None:
            raise fail(f"{text_flag} needs {path_flag} (the clip it transcribes)")
        return None
    if transcript is None or not transcript.strip():
        raise fail(f"{path_flag} needs {text_flag}: the words spoken in the clip")
    if not path.is_file():
        raise fail(f"{path_flag} {path} does not exist")
    return path.read_bytes()


@voices_app.command("clone")
def voices_clone(
    clip: Annotated[Path, typer.Argument(help="Reference clip (wav, flac, mp3, ogg, m4a; 1-30 s of speech).")],
    text: Annotated[str, typer.Option("--text", help="What the clip says (its transcript).")],
    name: Annotated[
        str | None, typer.Option("--name", help="Save under this name (the server's voices database).")
    ] = None,
    voices_db: Annotated[Path, typer.Option("--voices-db", help="The server's voices database.")] = Path(
        "~/.cache/turbotts/voices.sqlite3"
    ),
    checkpoint: CheckpointOpt = None,
    load_format: LoadFormatOpt = "auto",
    dummy_size: DummySizeOpt = "tiny",
    key_env: KeyEnvOpt = None,
    public_key: PublicKeyOpt = None,
) -> None:
    """Encode CLIP into an official spk_smp string (printed), and save it as a voice with --name."""
    from turbotts.api import TTS
    from turbotts.server.voices.store import VoiceStore

    data = _read_clip(clip, text, "CLIP", "--text")
    assert data is not None  # _read_clip returns bytes whenever a path is given
    tts = TTS.load(model_source(checkpoint, load_format, dummy_size, key_env, public_key), dtype="fp32")
    reference = tts.reference_from_clip(data, text)
    if name is not None:
        store = VoiceStore(voices_db)
        try:
            store.add(name, spk_smp=reference.spk_smp, transcript=reference.transcript)
        finally:
            store.close()
        typer.secho(f"saved voice {name!r} in {voices_db}", err=True)
    typer.echo(reference.spk_smp)


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
    require("cryptography", purpose="turbotts seal")
    from turbotts.seal_commands import seal_command

    raise typer.Exit(seal_command(checkpoint, out, key_env, signing_key))


@app.command()
def sign(
    checkpoint: Annotated[Path, typer.Argument(help="Plain checkpoint directory, signed in place.")],
    signing_key: Annotated[Path, typer.Option("--signing-key", help="Ed25519 PEM; created if missing.")] = Path(
        "turbotts-signing.pem"
    ),
) -> None:
    """Sign a plain checkpoint (manifest.json + manifest.sig) so --public-key verifies every file before loading."""
    require("cryptography", purpose="turbotts sign")
    from turbotts.seal_commands import sign_command

    raise typer.Exit(sign_command(checkpoint, signing_key))


@watermark_app.command("detect")
def watermark_detect(
    file: Annotated[Path, typer.Argument(help="Audio file (wav, flac, mp3, opus, aac).")],
    key_env: Annotated[str, typer.Option("--key-env", help="Env var with the watermark key.")] = (
        "TURBOTTS_WATERMARK_KEY"
    ),
) -> None:
    """Recover the watermark payload (key id, time, request hash) from an audio file."""
    require("cryptography", "av", purpose="turbotts watermark detect")
    from turbotts.guard.keys import secret_key_from_env
    from turbotts.guard.watermark_cli import watermark_detect_command

    raise typer.Exit(watermark_detect_command(str(file), secret_key_from_env(key_env)))


def _register_commands() -> None:
    """Commands that live in their own modules (kept out of this file to stay small)."""
    from turbotts.bench.command import bench
    from turbotts.bench.fuzz_command import fuzz
    from turbotts.bench.loadtest_command import loadtest
    from turbotts.bench.ort_vocoder_command import ort_vocoder
    from turbotts.bench.step_profile_command import bench_steps
    from turbotts.quality.check import quality_app
    from turbotts.quality.sweep import quant_sweep
    from turbotts.serve_command import serve

    app.command("serve")(serve)
    app.command("bench")(bench)
    app.command("bench-steps")(bench_steps)
    app.command("fuzz")(fuzz)
    app.command("loadtest")(loadtest)
    app.command("quant-sweep")(quant_sweep)
    app.command("ort-vocoder")(ort_vocoder)
    app.add_typer(quality_app, name="quality")


_register_commands()


def main() -> None:
    """Entry point: run the app, turning our own errors into exit code 2."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        app()
    except TurboTTSError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        sys.exit(USAGE_ERROR)
    except ModuleNotFoundError as exc:
        missing = explain_missing(exc, f"turbotts {' '.join(sys.argv[1:2])}".strip())
        if missing is None:
            raise
        typer.secho(f"error: {missing}", err=True, fg=typer.colors.RED)
        sys.exit(USAGE_ERROR)
