"""Keys for token authentication, read and written the way Pulsar's token tools do.

Theory of operation (Pulsar ``AuthTokenUtils``, ``TokensCliUtils``):

* **Settings name keys by value or by reference.** ``tokenSecretKey`` / ``tokenPublicKey`` (here
  ``token_secret_key`` / ``token_public_key``) hold ``data:[<type>][;base64],<bytes>`` (RFC 2397),
  ``file:///path/to/key`` (the file's raw bytes), or else the key itself in base64. A client's token setting
  holds ``token:<jwt>``, ``file:///path/to/token`` (the file's text, stripped), or the bare token.
* **Secret keys** are raw bytes (``pulsar tokens create-secret-key`` writes 32 random bytes for HS256, or
  their base64 with ``--base64``). As jjwt, a key shorter than 256 bits is refused, and the HMAC strength a
  key may verify follows its length: HS256 from 32 bytes, HS384 from 48, HS512 from 64.
* **Key pairs** are a PKCS#8 private key and an X.509 ``SubjectPublicKeyInfo`` public key, DER as
  ``pulsar tokens create-key-pair`` writes them, or PEM. RSA keys (at least 2048 bits, as jjwt) verify
  RS256/384/512 and PS256/384/512; an EC key verifies only the ES algorithm of its curve (P-256 -> ES256,
  P-384 -> ES384, P-521 -> ES512).
* **The key decides the algorithms.** A :class:`TokenKey` carries the algorithms it may verify; the token
  header's ``alg`` must be one of them. So ``alg: none`` is never accepted, and an HS256 token cannot be
  "verified" with the bytes of a public key (algorithm confusion): a public key allows no HMAC algorithm.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, unquote_to_bytes, urlsplit

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.bookkeeper.runtime.auth.errors import KeyConfigError

HMAC_KEY_BYTES_MIN = {"HS256": 32, "HS384": 48, "HS512": 64}
"""Shortest secret key each HMAC algorithm accepts (jjwt's ``Keys.hmacShaKeyFor`` rule)."""
RSA_KEY_BITS_MIN = 2048
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_CURVE_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
KEY_PAIR_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
RSA_KEY_BITS = {"RS256": 2048, "RS384": 3072, "RS512": 4096}
"""Modulus size ``create-key-pair`` uses per algorithm (jjwt's ``Keys.keyPairFor``)."""
EC_CURVES: dict[str, ec.EllipticCurve] = {
    "ES256": ec.SECP256R1(),
    "ES384": ec.SECP384R1(),
    "ES512": ec.SECP521R1(),
}
SETTING_FILE_BYTES_MAX = 1024 * 1024
"""A key or token file larger than this is refused (a key is at most a few KiB)."""

KeyKind = Literal["secret", "public", "private"]
KeyFormat = Literal["der", "pem"]


@dataclass(frozen=True, slots=True)
class TokenKey:
    """A key for signing or verifying tokens, with the algorithms it allows (the first signs)."""

    kind: KeyKind
    key: Any = field(repr=False)
    """``bytes`` for a secret key, a ``cryptography`` key object for the others."""
    algorithms: tuple[str, ...]

    @property
    def signing_algorithm(self) -> str:
        """The algorithm a new token is signed with: the strongest the key allows, as jjwt's ``signWith``."""
        if self.kind == "public":
            raise KeyConfigError("a public key cannot sign tokens")
        if self.kind == "secret":
            return self.algorithms[-1]
        return self.algorithms[0]


# -- reading settings ----------------------------------------------------------------------------------------


def _read_file(path_text: str, setting: str) -> bytes:
    path = Path(path_text)
    try:
        size = path.stat().st_size
        if size > SETTING_FILE_BYTES_MAX:
            raise KeyConfigError(f"{setting}: {path} holds {size} bytes (at most {SETTING_FILE_BYTES_MAX})")
        return path.read_bytes()
    except OSError as exc:
        raise KeyConfigError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None


def _file_url_path(value: str, setting: str) -> str:
    """``file:///abs``, ``file://localhost/abs``, ``file:/abs`` or ``file:relative`` -> a path."""
    if value.startswith("file://"):
        parts = urlsplit(value)
        if parts.netloc not in ("", "localhost"):
            raise KeyConfigError(f"{setting}: file URL with a remote host {parts.netloc!r} is not supported")
        return unquote(parts.path)
    return unquote(value.removeprefix("file:"))


def _data_url_bytes(value: str, setting: str) -> bytes:
    """RFC 2397: ``data:[<mediatype>][;base64],<data>``."""
    meta, comma, data = value.removeprefix("data:").partition(",")
    if not comma:
        raise KeyConfigError(f"{setting}: a data: URL needs a ',' before its data")
    if meta.split(";")[-1].strip().lower() == "base64":
        return _b64decode(data, setting)
    return unquote_to_bytes(data)


def _b64decode(text: str, setting: str) -> bytes:
    cleaned = "".join(text.split())
    try:
        if "-" in cleaned or "_" in cleaned:
            return base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
        return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise KeyConfigError(f"{setting}: not a data: or file: URL, and not base64") from None


def read_key_setting(value: str, setting: str = "key") -> bytes:
    """The key bytes a ``token_secret_key`` / ``token_public_key`` / private-key setting names."""
    value = value.strip()
    if not value:
        raise KeyConfigError(f"{setting} is empty")
    if value.startswith("data:"):
        return _data_url_bytes(value, setting)
    if value.startswith("file:"):
        return _read_file(_file_url_path(value, setting), setting)
    return _b64decode(value, setting)


def read_token_setting(value: str, setting: str = "token") -> str:
    """The token a client setting names: ``token:<jwt>``, ``file:///path`` (stripped text) or the bare jwt."""
    value = value.strip()
    if value.startswith("token:"):
        token = value.removeprefix("token:").strip()
    elif value.startswith("file:"):
        raw = _read_file(_file_url_path(value, setting), setting)
        try:
            token = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise KeyConfigError(f"{setting}: the token file is not ASCII text") from None
    else:
        token = value
    if not token:
        raise KeyConfigError(f"{setting} names an empty token")
    return token


def read_secret_setting(value: str, setting: str) -> bytes:
    """A secret a setting names: ``file:///path`` (the file's bytes, stripped of surrounding whitespace) or
    the text itself (UTF-8)."""
    if value.startswith("file:"):
        return _read_file(_file_url_path(value, setting), setting).strip()
    return value.encode("utf-8")


# -- loading keys --------------------------------------------------------------------------------------------


def secret_key(material: bytes, setting: str = "token_secret_key") -> TokenKey:
    """An HMAC key; the algorithms it allows follow its length (HS256 from 32 bytes ...)."""
    allowed = tuple(alg for alg, size in HMAC_KEY_BYTES_MIN.items() if len(material) >= size)
    if not allowed:
        raise KeyConfigError(
            f"{setting}: a secret key needs at least {HMAC_KEY_BYTES_MIN['HS256']} bytes (256 bits), "
            f"got {len(material)}"
        )
    if material.lstrip().startswith(b"-----BEGIN"):
        raise KeyConfigError(f"{setting}: this is a PEM key, not a secret key (use token_public_key)")
    return TokenKey("secret", bytes(material), allowed)


def _public_algorithms(key: object, setting: str) -> tuple[str, ...]:
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < RSA_KEY_BITS_MIN:
            raise KeyConfigError(f"{setting}: RSA key of {key.key_size} bits (at least {RSA_KEY_BITS_MIN})")
        return RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePublicKey):
        algorithm = EC_CURVE_ALGORITHMS.get(key.curve.name)
        if algorithm is None:
            raise KeyConfigError(f"{setting}: EC curve {key.curve.name} has no JWT algorithm")
        return (algorithm,)
    raise KeyConfigError(f"{setting}: {type(key).__name__} keys are not supported (RSA or EC)")


def public_key(material: bytes, setting: str = "token_public_key") -> TokenKey:
    """An X.509 ``SubjectPublicKeyInfo`` public key, DER or PEM."""
    try:
        if material.lstrip().startswith(b"-----BEGIN"):
            key: object = serialization.load_pem_public_key(material)
        else:
            key = serialization.load_der_public_key(material)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyConfigError(f"{setting}: not a DER or PEM public key ({exc})") from None
    return TokenKey("public", key, _public_algorithms(key, setting))


def private_key(material: bytes, setting: str = "private_key") -> TokenKey:
    """A PKCS#8 private key (unencrypted), DER or PEM."""
    try:
        if material.lstrip().startswith(b"-----BEGIN"):
            key: object = serialization.load_pem_private_key(material, password=None)
        else:
            key = serialization.load_der_private_key(material, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyConfigError(f"{setting}: not an unencrypted DER or PEM private key ({exc})") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise KeyConfigError(f"{setting}: {type(key).__name__} keys are not supported (RSA or EC)")
    algorithms = _public_algorithms(key.public_key(), setting)
    if isinstance(key, rsa.RSAPrivateKey):
        # jjwt's signWith picks the RSA algorithm from the modulus size.
        strongest = "RS512" if key.key_size >= 4096 else "RS384" if key.key_size >= 3072 else "RS256"
        algorithms = (strongest, *(a for a in algorithms if a != strongest))
    return TokenKey("private", key, algorithms)


def verification_key(secret_setting: str | None, public_setting: str | None) -> TokenKey:
    """The key a broker or bookie verifies tokens with: exactly one of the two settings."""
    if secret_setting and public_setting:
        raise KeyConfigError("set token_secret_key or token_public_key, not both")
    if secret_setting:
        return secret_key(read_key_setting(secret_setting, "token_secret_key"))
    if public_setting:
        return public_key(read_key_setting(public_setting, "token_public_key"))
    raise KeyConfigError("token authentication needs token_secret_key or token_public_key")


# -- creating keys -------------------------------------------------------------------------------------------


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """Random key bytes for ``algorithm`` (32 for HS256, 48 for HS384, 64 for HS512)."""
    size = HMAC_KEY_BYTES_MIN.get(algorithm)
    if size is None:
        raise KeyConfigError(f"{algorithm} is not an HMAC algorithm ({', '.join(HMAC_KEY_BYTES_MIN)})")
    return secrets.token_bytes(size)


def create_key_pair(algorithm: str = "RS256", key_format: KeyFormat = "der") -> tuple[bytes, bytes]:
    """A new (private PKCS#8, public SubjectPublicKeyInfo) pair for ``algorithm``, DER or PEM."""
    generated: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm in RSA_KEY_BITS:
        generated = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS[algorithm])
    elif algorithm in EC_CURVES:
        generated = ec.generate_private_key(EC_CURVES[algorithm])
    else:
        raise KeyConfigError(f"{algorithm} has no key pair ({', '.join(KEY_PAIR_ALGORITHMS)})")
    encoding = serialization.Encoding.PEM if key_format == "pem" else serialization.Encoding.DER
    private = generated.private_bytes(
        encoding, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = generated.public_key().public_bytes(encoding, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def write_key_file(path: Path, data: bytes) -> None:
    """Write key bytes readable by the owner only (``0600``), replacing any file atomically."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)
