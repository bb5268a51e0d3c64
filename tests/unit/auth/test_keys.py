"""Key and token settings in Pulsar's forms (data:, file:, base64; token:), key loading and generation."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from fixtures.auth import TokenKeys

from magnetar.bookkeeper.runtime.auth.errors import KeyConfigError
from magnetar.bookkeeper.runtime.auth.keys import (
    create_key_pair,
    create_secret_key,
    private_key,
    public_key,
    read_key_setting,
    read_token_setting,
    secret_key,
    verification_key,
    write_key_file,
)

KEY = bytes(range(32))


def test_key_setting_forms(tmp_path: Path) -> None:
    path = tmp_path / "my secret.key"
    path.write_bytes(KEY)
    b64 = base64.b64encode(KEY).decode()
    assert read_key_setting(f"data:;base64,{b64}") == KEY
    assert read_key_setting(f"data:application/octet-stream;base64,{b64}") == KEY
    assert read_key_setting("data:,%00%01abc") == b"\x00\x01abc"
    assert read_key_setting(path.as_uri()) == KEY  # file:///.../my%20secret.key
    assert read_key_setting(f"file:{path}") == KEY
    assert read_key_setting(b64) == KEY
    assert read_key_setting(base64.urlsafe_b64encode(KEY).decode().rstrip("=")) == KEY
    assert read_key_setting(f"  {b64[:10]}\n{b64[10:]} ") == KEY  # whitespace inside base64 is ignored


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "empty"),
        ("data:;base64", "','"),
        ("data:;base64,!!!", "base64"),
        ("not base64 at all!", "base64"),
        ("file:///does/not/exist", "cannot read"),
        ("file://remote.host/key", "remote host"),
    ],
)
def test_bad_key_settings_name_the_setting(value: str, message: str) -> None:
    with pytest.raises(KeyConfigError, match=message) as caught:
        read_key_setting(value, "token_secret_key")
    assert "token_secret_key" in str(caught.value) or message == "empty"


def test_token_settings(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("abc.def.ghi\n")
    assert read_token_setting("token:abc.def.ghi") == "abc.def.ghi"
    assert read_token_setting(path.as_uri()) == "abc.def.ghi"
    assert read_token_setting("abc.def.ghi") == "abc.def.ghi"
    with pytest.raises(KeyConfigError):
        read_token_setting("token:")
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(KeyConfigError, match="ASCII"):
        read_token_setting(path.as_uri())


def test_a_big_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * (1024 * 1024 + 1))
    with pytest.raises(KeyConfigError, match="at most"):
        read_key_setting(path.as_uri())


def test_secret_key_strength_decides_the_hmac_algorithms() -> None:
    assert secret_key(bytes(32)).algorithms == ("HS256",)
    assert secret_key(bytes(48)).algorithms == ("HS256", "HS384")
    assert secret_key(bytes(64)).algorithms == ("HS256", "HS384", "HS512")
    assert secret_key(bytes(64)).signing_algorithm == "HS512"  # jjwt's signWith picks the strongest
    with pytest.raises(KeyConfigError, match="at least 32 bytes"):
        secret_key(bytes(31))
    with pytest.raises(KeyConfigError, match="PEM"):
        secret_key(b"-----BEGIN PUBLIC KEY-----" + bytes(40))


def test_created_secret_keys_have_the_algorithm_size() -> None:
    assert len(create_secret_key()) == 32
    assert len(create_secret_key("HS384")) == 48
    assert len(create_secret_key("HS512")) == 64
    assert create_secret_key() != create_secret_key()
    with pytest.raises(KeyConfigError):
        create_secret_key("RS256")


def test_rsa_key_pair_der_is_pkcs8_and_x509(token_keys: TokenKeys) -> None:
    private = serialization.load_der_private_key(token_keys.rsa_private, password=None)
    public = serialization.load_der_public_key(token_keys.rsa_public)
    assert isinstance(private, rsa.RSAPrivateKey)
    assert isinstance(public, rsa.RSAPublicKey)
    assert private.key_size == 2048
    loaded = public_key(token_keys.rsa_public)
    assert loaded.kind == "public"
    assert "RS256" in loaded.algorithms
    assert "HS256" not in loaded.algorithms
    assert private_key(token_keys.rsa_private).signing_algorithm == "RS256"


@pytest.mark.parametrize(("algorithm", "curve"), [("ES256", "secp256r1"), ("ES384", "secp384r1")])
def test_ec_key_pairs_allow_only_their_curve_algorithm(algorithm: str, curve: str) -> None:
    private_bytes, public_bytes = create_key_pair(algorithm, "pem")
    assert private_bytes.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_bytes.startswith(b"-----BEGIN PUBLIC KEY-----")
    loaded = public_key(public_bytes)
    assert isinstance(loaded.key, ec.EllipticCurvePublicKey)
    assert loaded.key.curve.name == curve
    assert loaded.algorithms == (algorithm,)
    assert private_key(private_bytes).signing_algorithm == algorithm


def test_weak_and_foreign_keys_are_refused() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    der = weak.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(KeyConfigError, match="1024 bits"):
        public_key(der)
    with pytest.raises(KeyConfigError, match="public key"):
        public_key(b"garbage")
    with pytest.raises(KeyConfigError, match="private key"):
        private_key(b"garbage")
    with pytest.raises(KeyConfigError, match="no key pair"):
        create_key_pair("HS256")


def test_verification_key_takes_exactly_one_setting(token_keys: TokenKeys) -> None:
    assert verification_key(token_keys.secret_setting, None).kind == "secret"
    assert verification_key(None, token_keys.rsa_public_setting).kind == "public"
    with pytest.raises(KeyConfigError, match="not both"):
        verification_key(token_keys.secret_setting, token_keys.rsa_public_setting)
    with pytest.raises(KeyConfigError, match="needs"):
        verification_key(None, None)


def test_written_key_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "k"
    write_key_file(path, KEY)
    assert path.read_bytes() == KEY
    assert path.stat().st_mode & 0o777 == 0o600
