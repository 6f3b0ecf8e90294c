from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from turbotts.errors import InvalidInputError
from turbotts.guard import apikeys
from turbotts.guard.apikeys import APIKeyStore, bearer_token, hash_key, key_id

KEY_FILE = """
# production keys
sk-alpha   # the web app
  sk-beta

# sk-retired
"""


def write_keys(tmp_path: Path, text: str = KEY_FILE) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text(text)
    return path


def test_file_and_environment_keys_are_both_accepted(tmp_path: Path) -> None:
    store = APIKeyStore.load(write_keys(tmp_path), environ={"TURBOTTS_API_KEYS": " sk-gamma, ,sk-alpha"})
    assert store.is_enabled and store.num_keys == 3  # sk-alpha counted once
    for token in ("sk-alpha", "sk-beta", "sk-gamma"):
        assert store.verify(token) == "key_" + hashlib.sha256(token.encode()).hexdigest()[:12]
    assert store.verify("sk-retired") is None  # commented out
    assert store.verify("sk-alph") is None and store.verify("") is None and store.verify(None) is None


def test_environment_only_and_custom_variable() -> None:
    store = APIKeyStore.load(env_var="MY_KEYS", environ={"MY_KEYS": "k1,k2", "TURBOTTS_API_KEYS": "k3"})
    assert store.verify("k1") is not None and store.verify("k3") is None


def test_no_keys_means_auth_disabled() -> None:
    store = APIKeyStore.load(environ={})
    assert not store.is_enabled and store.verify("anything") is None


def test_only_hashes_are_kept(tmp_path: Path) -> None:
    store = APIKeyStore.load(write_keys(tmp_path), environ={})
    dump = repr(vars(store)).encode() + b"".join(store._hashes)
    assert b"sk-alpha" not in dump and b"sk-beta" not in dump
    assert store._hashes == tuple(sorted(bytes.fromhex(hash_key(k)) for k in ("sk-alpha", "sk-beta")))


def test_every_stored_hash_is_compared_whatever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit: the work done (and so the time) does not depend on which key matched."""
    calls: list[int] = []
    real_compare = hmac.compare_digest

    def counting_compare(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return real_compare(a, b)

    monkeypatch.setattr(apikeys.hmac, "compare_digest", counting_compare)
    keys = [f"key-{i}" for i in range(5)]
    store = APIKeyStore(keys)
    for token in [*keys, "wrong"]:
        calls.clear()
        store.verify(token)
        assert len(calls) == 5


def test_unreadable_or_empty_key_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot read"):
        APIKeyStore.load(tmp_path / "missing.txt", environ={})
    with pytest.raises(InvalidInputError, match="holds no key"):
        APIKeyStore.load(write_keys(tmp_path, "# nothing here\n\n"), environ={})


def test_malformed_keys_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        APIKeyStore(["has space"])
    with pytest.raises(InvalidInputError):
        APIKeyStore([""])


def test_bearer_header_parsing() -> None:
    assert bearer_token("Bearer sk-alpha") == "sk-alpha"
    assert bearer_token("bearer   sk-alpha ") == "sk-alpha"
    assert bearer_token("Basic dXNlcjpwYXNz") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_key_id_is_a_hash_prefix() -> None:
    digest = hash_key("sk-alpha")
    assert key_id(digest) == "key_" + digest[:12]
