"""TLS contexts from certificate files, and the handshake step servers and clients run on a new connection.

Theory of operation. Pulsar and BookKeeper configure TLS with PEM files: the service's certificate chain
(``tlsCertificateFilePath``), its private key (``tlsKeyFilePath``) and the CA certificates it trusts
(``tlsTrustCertsFilePath``); ``tlsRequireTrustedClientCertOnConnect`` makes a server demand a client
certificate signed by those CAs (mutual TLS). :func:`server_ssl_context` and :func:`client_ssl_context`
build Python :class:`ssl.SSLContext` objects from the same files; a missing or unreadable file, or a key that
does not match its certificate, is a :class:`TlsConfigError` naming the file, found at startup.

Servers accept a TCP connection, wrap it in :class:`trio.SSLStream` and run :func:`handshake` inside the
connection's own task, bounded by a timeout, so a slow or broken TLS client never blocks the accept loop and
never affects another connection. Clients verify the server's certificate and host name by default.
TLS 1.2 is the oldest protocol accepted (``tls_protocol_min``).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal, Self

import trio
from pydantic import BaseModel, ConfigDict, model_validator

TlsProtocol = Literal["TLSv1.2", "TLSv1.3"]
_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
TLS_HANDSHAKE_TIMEOUT_MS_DEFAULT = 10_000


class TlsConfigError(ValueError):
    """A TLS file cannot be used (missing, unreadable, not PEM, key not matching the certificate)."""


class TlsHandshakeError(Exception):
    """The TLS handshake with a peer failed or timed out; only that connection is affected."""


def _existing(path: Path | str, what: str) -> str:
    resolved = Path(path)
    if not resolved.is_file():
        raise TlsConfigError(f"{what} {resolved} does not exist or is not a file")
    return str(resolved)


def _base_context(purpose: ssl.Purpose, protocol_min: TlsProtocol) -> ssl.SSLContext:
    context = ssl.create_default_context(purpose)
    context.minimum_version = _VERSIONS[protocol_min]
    return context


def _load_chain(context: ssl.SSLContext, certificate_file: Path | str, key_file: Path | str) -> None:
    cert = _existing(certificate_file, "TLS certificate file")
    key = _existing(key_file, "TLS key file")
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"cannot use certificate {cert} with key {key}: {exc.reason or exc}") from None


def _load_trust(context: ssl.SSLContext, trust_certs_file: Path | str) -> None:
    trust = _existing(trust_certs_file, "TLS trust certificates file")
    try:
        context.load_verify_locations(cafile=trust)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"cannot read trusted certificates from {trust}: {exc.reason or exc}") from None


def server_ssl_context(
    certificate_file: Path | str,
    key_file: Path | str,
    *,
    trust_certs_file: Path | str | None = None,
    require_client_cert: bool = False,
    protocol_min: TlsProtocol = "TLSv1.2",
) -> ssl.SSLContext:
    """A server context presenting ``certificate_file``; with ``require_client_cert``, clients must present a
    certificate signed by a CA of ``trust_certs_file`` (Pulsar ``tlsRequireTrustedClientCertOnConnect``)."""
    context = _base_context(ssl.Purpose.CLIENT_AUTH, protocol_min)
    _load_chain(context, certificate_file, key_file)
    if require_client_cert:
        if trust_certs_file is None:
            raise TlsConfigError("requiring client certificates needs a trust certificates file")
        _load_trust(context, trust_certs_file)
        context.verify_mode = ssl.CERT_REQUIRED
    elif trust_certs_file is not None:
        _load_trust(context, trust_certs_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def client_ssl_context(
    *,
    trust_certs_file: Path | str | None = None,
    certificate_file: Path | str | None = None,
    key_file: Path | str | None = None,
    check_hostname: bool = True,
    protocol_min: TlsProtocol = "TLSv1.2",
) -> ssl.SSLContext:
    """A client context trusting ``trust_certs_file`` (else the system CAs); with a certificate and key it
    also presents them (mutual TLS). ``check_hostname`` is Pulsar's ``tlsHostnameVerificationEnable``."""
    context = _base_context(ssl.Purpose.SERVER_AUTH, protocol_min)
    if trust_certs_file is not None:
        _load_trust(context, trust_certs_file)
    if (certificate_file is None) != (key_file is None):
        raise TlsConfigError("a client certificate needs its key file, and a key file its certificate")
    if certificate_file is not None and key_file is not None:
        _load_chain(context, certificate_file, key_file)
    context.check_hostname = check_hostname
    return context


async def handshake(stream: trio.SSLStream[trio.SocketStream], timeout_s: float) -> None:
    """Run the TLS handshake of a wrapped connection, bounded by ``timeout_s``."""
    try:
        with trio.fail_after(timeout_s):
            await stream.do_handshake()
    except trio.TooSlowError:
        raise TlsHandshakeError(f"TLS handshake did not complete within {timeout_s:g} s") from None
    except trio.BrokenResourceError as exc:
        cause = exc.__cause__
        raise TlsHandshakeError(f"TLS handshake failed: {cause or exc}") from None
    except trio.ClosedResourceError:
        raise TlsHandshakeError("connection closed during the TLS handshake") from None


def peer_address(stream: trio.SocketStream) -> tuple[str, int] | None:
    """The remote (host, port) of a TCP connection, or None when the socket no longer knows it."""
    try:
        peer = stream.socket.getpeername()
        return str(peer[0]), int(peer[1])
    except (OSError, IndexError, TypeError, ValueError):
        return None


class ServerTlsSettings(BaseModel):
    """The TLS files of a server port, under the names brokers and bookies share (Pulsar's
    ``tlsCertificateFilePath``, ``tlsKeyFilePath``, ``tlsTrustCertsFilePath``,
    ``tlsRequireTrustedClientCertOnConnect``): the broker's HTTPS port (``http_port_tls``), the bookie's
    protocol port. Each process's settings model inherits them, declared and checked once here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tls_certificate_file: Path | None = None
    """PEM certificate chain, with ``tls_key_file`` (a bookie then serves its protocol over TLS only)."""
    tls_key_file: Path | None = None
    tls_trust_certs_file: Path | None = None
    """PEM CA certificates that client certificates are checked against."""
    tls_require_trusted_client_cert: bool = False
    """Mutual TLS: refuse clients without a certificate signed by ``tls_trust_certs_file``."""

    @model_validator(mode="after")
    def _check_server_tls(self) -> Self:
        if (self.tls_certificate_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_certificate_file and tls_key_file go together")
        if self.tls_require_trusted_client_cert and self.tls_trust_certs_file is None:
            raise ValueError("tls_require_trusted_client_cert needs tls_trust_certs_file")
        return self
