"""Checkpoint layout, digests, dummy weights and strict loading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.golden import FIXTURE_DIR
from turbotts.digests import file_sha256
from turbotts.errors import CheckpointError
from turbotts.model import checkpoint as ckpt
from turbotts.model.dummy import FULL_CONFIG, TINY_CONFIG, write_dummy_checkpoint
from turbotts.model.official_keys import official_shapes
from turbotts.sources import ModelSource, load_model


def test_fixture_checkpoint_config_is_read_from_its_files() -> None:
    config = ckpt.open_checkpoint(FIXTURE_DIR).model_config()
    assert config.gpt.hidden_size == 64 and config.gpt.num_hidden_layers == 2
    assert config.gpt.num_text_tokens == 768
    assert config.dvae.vq.dim == 64 and config.vocos.dim == 32


def test_official_shapes_match_the_fixture_files() -> None:
    for relative, shapes in official_shapes(TINY_CONFIG).items():
        actual = {k: tuple(v.shape) for k, v in load_file(str(FIXTURE_DIR / relative)).items()}
        assert actual == shapes, relative


def test_full_size_shapes_are_the_official_dimensions() -> None:
    shapes = official_shapes(FULL_CONFIG)
    gpt = shapes[ckpt.GPT_WEIGHTS_FILE]
    assert gpt["layers.19.mlp.gate_proj.weight"] == (3072, 768)
    assert "layers.20.mlp.gate_proj.weight" not in gpt
    assert shapes[ckpt.EMBED_FILE]["emb_text.weight"] == (21178, 768)
    assert shapes[ckpt.VOCOS_FILE]["head.out.weight"] == (1026, 512)
    assert shapes[ckpt.DVAE_FILE]["vq_layer.quantizer.rvqs.0.project_in.weight"] == (4, 512)


def test_missing_file_is_named(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE_DIR / "asset", tmp_path / "asset")
    (tmp_path / ckpt.DVAE_FILE).unlink()
    with pytest.raises(CheckpointError, match=r"DVAE\.safetensors"):
        ckpt.open_checkpoint(tmp_path)


def test_official_layout_with_wrong_digest_is_refused_naming_the_file(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE_DIR / "asset", tmp_path / "asset")  # no root config.json: claims to be official
    with pytest.raises(CheckpointError, match=r"asset/(Decoder|DVAE|Embed|Vocos)\.safetensors has SHA-256"):
        ckpt.open_checkpoint(tmp_path)


def test_verified_stamp_skips_rehashing_only_while_files_are_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(FIXTURE_DIR / "asset", tmp_path / "asset")
    digests = {rel: file_sha256(tmp_path / rel) for rel in ckpt.OFFICIAL_SHA256 if (tmp_path / rel).exists()}
    monkeypatch.setattr(ckpt, "OFFICIAL_SHA256", digests)  # pretend the tiny files are the release
    ckpt.open_checkpoint(tmp_path)
    assert (tmp_path / ckpt.VERIFIED_STAMP).exists()
    ckpt.open_checkpoint(tmp_path)  # stamped: fine
    state = load_file(str(tmp_path / ckpt.VOCOS_FILE))
    state["head.out.bias"] = state["head.out.bias"] + 1.0
    save_file(state, str(tmp_path / ckpt.VOCOS_FILE))
    with pytest.raises(CheckpointError, match=r"Vocos\.safetensors"):
        ckpt.open_checkpoint(tmp_path)


def test_init_checkpoint_is_deterministic_and_loads(tmp_path: Path) -> None:
    first = write_dummy_checkpoint(tmp_path / "a", size="tiny", seed=3)
    second = write_dummy_checkpoint(tmp_path / "b", size="tiny", seed=3)
    other = write_dummy_checkpoint(tmp_path / "c", size="tiny", seed=4)
    a, b, c = (load_file(str(root / ckpt.GPT_WEIGHTS_FILE)) for root in (first, second, other))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["layers.0.self_attn.q_proj.weight"], c["layers.0.self_attn.q_proj.weight"])
    for relative, shapes in official_shapes(TINY_CONFIG).items():
        written = {k: tuple(v.shape) for k, v in load_file(str(first / relative)).items()}
        assert written == shapes
    model = load_model(ModelSource(checkpoint=first))
    assert model.config.gpt.hidden_size == 64 and not model.is_dummy
    assert json.loads((first / "config.json").read_text())["size"] == "tiny"


def test_wrong_shapes_fail_with_the_file_name(tmp_path: Path) -> None:
    root = write_dummy_checkpoint(tmp_path, size="tiny", seed=0)
    config = json.loads((root / "config.json").read_text())
    config["decoder"]["hidden"] = 48  # weights say 32
    (root / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"Decoder\.safetensors does not fit"):
        load_model(ModelSource(checkpoint=root))


def test_dummy_load_format_needs_no_directory() -> None:
    model = load_model(ModelSource(load_format="dummy", dummy_size="tiny"))
    assert model.is_dummy and model.tokenizer.token_id("[Stts]") == 718


def test_bad_source_options_are_user_errors() -> None:
    with pytest.raises(CheckpointError, match="load-format"):
        ModelSource(load_format="gguf")
    with pytest.raises(CheckpointError, match="dummy-size"):
        ModelSource(load_format="dummy", dummy_size="huge")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_loaded_weights_are_the_checkpoints_tensors_on_the_device(tmp_path: Path, dtype: str) -> None:
    """The GPT is built on the meta device and takes the file's tensors: none may stay
    meta, each must equal the file's value (in the asked dtype), and a half-precision
    file still gives the float32 model that was asked for."""
    write_dummy_checkpoint(tmp_path, "tiny")
    gpt_file = tmp_path / ckpt.GPT_WEIGHTS_FILE
    state = load_file(str(gpt_file))
    save_file({k: v.half() for k, v in state.items()}, str(gpt_file))
    model = load_model(ModelSource(checkpoint=tmp_path), dtype=dtype)
    tensors = {**dict(model.modules.named_parameters()), **dict(model.modules.named_buffers())}
    assert not [name for name, tensor in tensors.items() if tensor.is_meta]
    params = dict(model.modules.gpt.named_parameters())
    for key, value in state.items():
        name = key.removeprefix("gpt.")
        if name in params:
            assert params[name].dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
            assert torch.equal(params[name].float(), value.half().to(params[name].dtype).float()), name
