"""``broker_service_port_tls``: off unless set, bounded, needs the TLS port's certificate files, and is one of
the ports a broker checks before it starts; its server context is the HTTPS port's."""

from __future__ import annotations

import ssl
from typing import Any

import pydantic
import pytest
from fixtures.auth import TlsFiles

from magnetar.broker.run import BINARY_TLS_SERVICE, broker_ports
from magnetar.broker.settings import BrokerSettings


def settings(**given: Any) -> BrokerSettings:
    return BrokerSettings.model_validate({"metadata_url": "memory://", **given})


def files(tls_files: TlsFiles) -> dict[str, Any]:
    return {"tls_certificate_file": tls_files.server_cert, "tls_key_file": tls_files.server_key}


def test_off_by_default() -> None:
    plain = settings()
    assert plain.broker_service_port_tls is None
    assert plain.binary_ssl_context() is None
    assert BINARY_TLS_SERVICE not in {service for _, _, service, _ in broker_ports(plain)}


@pytest.mark.parametrize("port", [-1, 65536, 2**63, "\uff16\uff16\uff15\uff11", "6651\u202e", "66\x0051"])
def test_bounds_and_hostile_values(tls_files: TlsFiles, port: Any) -> None:
    with pytest.raises(pydantic.ValidationError):
        settings(broker_service_port_tls=port, **files(tls_files))


def test_needs_the_certificate_files() -> None:
    with pytest.raises(pydantic.ValidationError, match="broker_service_port_tls needs tls_certificate_file"):
        settings(broker_service_port_tls=6651)


def test_the_port_is_checked_and_served_with_the_https_context(tls_files: TlsFiles) -> None:
    secure = settings(broker_service_port_tls=6651, **files(tls_files))
    assert (6651, "127.0.0.1", BINARY_TLS_SERVICE, "broker_service_port_tls") in broker_ports(secure)
    context = secure.binary_ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE  # no client certificate asked for, as on the HTTPS port
    any_port = settings(broker_service_port_tls=0, **files(tls_files))
    assert BINARY_TLS_SERVICE not in {service for _, _, service, _ in broker_ports(any_port)}  # 0: free port
    assert any_port.binary_ssl_context() is not None
