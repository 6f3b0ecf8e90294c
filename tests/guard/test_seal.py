"""Sealed checkpoints: round trip in memory, and refusal of anything tampered, truncated, missing or unsigned."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from safetensors.torch import load_file

from tests.golden import FIXTURE_DIR
from turbotts.errors import CheckpointError
from turbotts.guard import keys, seal, sealed_dir
from turbotts.model import checkpoint as ckpt
from turbotts.model.files import MemoryFiles
from turbotts.seal_commands import seal_command

KEY = bytes(range(32))
SIGNER = Ed25519PrivateKey.from_private_bytes(bytes(32))


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sealed")
    sealed_dir.seal_directory(FIXTURE_DIR, out, ckpt.checkpoint_file_list(FIXTURE_DIR), KEY, SIGNER)
    return out


def open_sealed(directory: Path, key: bytes = KEY, public_key: object = None) -> dict[str, bytes]:
    return sealed_dir.open_sealed_directory(directory, key, public_key or SIGNER.public_key())  # type: ignore[arg-type]


@pytest.fixture()
def sealed_copy(sealed: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(sealed, tmp_path / "copy"))


def test_round_trip_in_memory(sealed: Path) -> None:
    files = open_sealed(sealed)
    assert set(files) == set(ckpt.checkpoint_file_list(FIXTURE_DIR))
    for relative, data in files.items():
        assert data == (FIXTURE_DIR / relative).read_bytes(), relative
    in_memory = MemoryFiles(files, origin="sealed")
    original = load_file(str(FIXTURE_DIR / ckpt.GPT_WEIGHTS_FILE))
    states = in_memory.tensors(ckpt.GPT_WEIGHTS_FILE)
    assert states.keys() == original.keys()
    assert all(torch.equal(states[k], v) for k, v in original.items())
    assert in_memory.has(ckpt.TOKENIZER_FILE) and in_memory.has(ckpt.GPT_CONFIG_FILE)


def test_no_plaintext_on_disk(sealed: Path) -> None:
    names = {p.relative_to(sealed).as_posix() for p in sealed.rglob("*") if p.is_file()}
    assert names == {f"{r}{seal.SEALED_SUFFIX}" for r in ckpt.checkpoint_file_list(FIXTURE_DIR)} | {
        seal.MANIFEST_FILE,
        seal.SIGNATURE_FILE,
        seal.PUBLIC_KEY_FILE,
    }
    sealed_bytes = b"".join(p.read_bytes() for p in sealed.rglob("*.sealed"))
    for relative in (ckpt.TOKENIZER_FILE, ckpt.GPT_CONFIG_FILE, ckpt.GPT_WEIGHTS_FILE):
        plaintext = (FIXTURE_DIR / relative).read_bytes()
        for start in range(0, min(len(plaintext), 4096), 512):
            assert plaintext[start : start + 32] not in sealed_bytes, relative
    before = sorted(sealed.rglob("*"))
    open_sealed(sealed)
    assert sorted(sealed.rglob("*")) == before


def _sealed_name(relative: str) -> str:
    return relative + seal.SEALED_SUFFIX


def test_tampered_file_is_named(sealed_copy: Path) -> None:
    path = sealed_copy / _sealed_name(ckpt.VOCOS_FILE)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"Vocos.safetensors.sealed.*tampered"):
        open_sealed(sealed_copy)


def test_truncated_file_is_named(sealed_copy: Path) -> None:
    path = sealed_copy / _sealed_name(ckpt.TOKENIZER_FILE)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"tokenizer.json.sealed.*truncated"):
        open_sealed(sealed_copy)


def test_missing_file_is_named(sealed_copy: Path) -> None:
    (sealed_copy / _sealed_name(ckpt.DVAE_FILE)).unlink()
    with pytest.raises(CheckpointError, match=r"DVAE.safetensors.sealed is missing"):
        open_sealed(sealed_copy)


def test_unsigned_or_edited_manifest_is_refused(sealed_copy: Path) -> None:
    manifest = sealed_copy / seal.MANIFEST_FILE
    manifest.write_bytes(manifest.read_bytes().replace(b'"size": ', b'"size":  '))
    with pytest.raises(CheckpointError, match=r"manifest.json does not match its signature"):
        open_sealed(sealed_copy)
    (sealed_copy / seal.SIGNATURE_FILE).unlink()
    with pytest.raises(CheckpointError, match=r"manifest.sig is missing"):
        open_sealed(sealed_copy)


def test_wrong_keys_are_refused(sealed: Path) -> None:
    with pytest.raises(CheckpointError, match=r"manifest.json.*another AES key"):
        open_sealed(sealed, bytes(32))
    other_signer = Ed25519PrivateKey.generate()
    with pytest.raises(CheckpointError, match=r"manifest.json does not match its signature"):
        open_sealed(sealed, KEY, other_signer.public_key())


def test_swapped_files_fail_authentication(sealed_copy: Path) -> None:
    """The relative path is associated data: a sealed file renamed to another's name does not decrypt."""
    a, b = sealed_copy / _sealed_name(ckpt.DVAE_FILE), sealed_copy / _sealed_name(ckpt.VOCOS_FILE)
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    with pytest.raises(CheckpointError, match=r"(DVAE|Vocos)\.safetensors\.sealed"):
        open_sealed(sealed_copy)


def test_plain_manifest(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(FIXTURE_DIR / "asset", plain / "asset")
    shutil.copy(FIXTURE_DIR / ckpt.ROOT_CONFIG_FILE, plain / ckpt.ROOT_CONFIG_FILE)
    assert sealed_dir.verify_plain_manifest(plain, SIGNER.public_key()) is False
    sealed_dir.write_plain_manifest(plain, ckpt.checkpoint_file_list(plain), SIGNER)
    assert sealed_dir.verify_plain_manifest(plain, SIGNER.public_key()) is True
    target = plain / ckpt.EMBED_FILE
    target.write_bytes(target.read_bytes()[:-1] + b"\x00")
    with pytest.raises(CheckpointError, match=r"Embed.safetensors differs from the signed manifest"):
        sealed_dir.verify_plain_manifest(plain, SIGNER.public_key())


def test_key_handling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TT_KEY_HEX", KEY.hex())
    monkeypatch.setenv("TT_KEY_B64", base64.b64encode(KEY).decode())
    monkeypatch.setenv("TT_KEY_SHORT", "abcd")
    assert keys.secret_key_from_env("TT_KEY_HEX") == KEY == keys.secret_key_from_env("TT_KEY_B64")
    with pytest.raises(CheckpointError, match=r"TT_KEY_SHORT"):
        keys.secret_key_from_env("TT_KEY_SHORT")
    with pytest.raises(CheckpointError, match=r"TT_KEY_UNSET is not set"):
        keys.secret_key_from_env("TT_KEY_UNSET")
    signing_path = tmp_path / "keys" / "signing.pem"
    assert seal_command(FIXTURE_DIR, tmp_path / "out", "TT_KEY_HEX", signing_path) == 0
    assert "created a new Ed25519 signing key" in capsys.readouterr().out
    assert signing_path.stat().st_mode & 0o777 == 0o600
    public_key = keys.load_public_key(keys.public_key_path(signing_path))
    assert open_sealed(tmp_path / "out", KEY, public_key)
    key_again, created = keys.load_or_create_signing_key(signing_path)
    assert not created and keys.load_public_key(tmp_path / "out" / seal.PUBLIC_KEY_FILE) is not None
    assert key_again.public_key().public_bytes_raw() == public_key.public_bytes_raw()
