"""The ZooKeeper metadata store over TLS: a real ZooKeeper (Debian's) serving a ``secureClientPort`` with a
``trustme`` certificate and requiring client certificates (its default ``ssl.clientAuth=need``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from fixtures.auth import TlsFiles
from fixtures.zookeeper import ZooKeeperServer, _free_port

from magnetar.bookkeeper.metadata.api import StoreUnavailableError
from magnetar.bookkeeper.metadata.factory import open_metadata_store
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings

pytestmark = pytest.mark.zookeeper
NETTY_JARS = ("netty-codec", "netty-resolver", "netty-transport-native-unix-common")


class TlsZooKeeper(ZooKeeperServer):
    """A ZooKeeper with a plain port (for its readiness probe) and a TLS port (Netty) for the test."""

    def __init__(self, base_dir: Path, tls: TlsFiles) -> None:
        super().__init__(base_dir)
        self.tls = tls
        self.secure_port = _free_port()

    def _command(self) -> list[str]:
        # Debian's zookeeper.jar manifest omits the Netty jars the Netty connection factory needs.
        command = super()._command()
        classpath = command.index("-cp") + 1
        command[classpath] += "".join(f":/usr/share/java/{jar}.jar" for jar in NETTY_JARS)
        return command

    def _write_config(self) -> None:
        super()._write_config()
        keystore = self.base_dir / "conf/server-keystore.pem"
        # ZooKeeper's PEM key store reads PKCS#8 keys only; trustme writes SEC1 ("EC PRIVATE KEY").
        key = serialization.load_pem_private_key(self.tls.server_key.read_bytes(), password=None)
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        keystore.write_bytes(pkcs8 + self.tls.server_cert.read_bytes())
        extra = {
            "secureClientPort": self.secure_port,
            "secureClientPortAddress": "127.0.0.1",
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location": keystore,
            "ssl.keyStore.type": "PEM",
            "ssl.trustStore.location": self.tls.ca_cert,
            "ssl.trustStore.type": "PEM",
            "ssl.hostnameVerification": "false",  # client certificates name no host
        }
        with (self.base_dir / "conf/zoo.cfg").open("a") as config:
            config.write("".join(f"{key}={value}\n" for key, value in extra.items()))


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[TlsZooKeeper]:
    server = TlsZooKeeper(tmp_path_factory.mktemp("zookeeper-tls"), tls_files)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def tls_settings(tls: TlsFiles, **overrides: object) -> MetadataStoreSettings:
    values: dict[str, object] = {
        "session_timeout_ms": 4_000,
        "operation_timeout_ms": 5_000,
        "zk_tls_enabled": True,
        "zk_tls_trust_certs_file": tls.ca_cert,
        "zk_tls_certificate_file": tls.client_cert,
        "zk_tls_key_file": tls.client_key,
    }
    values.update(overrides)
    return MetadataStoreSettings(**values)


async def test_metadata_store_over_tls(tls_zookeeper: TlsZooKeeper, tls_files: TlsFiles) -> None:
    url = f"zk:127.0.0.1:{tls_zookeeper.secure_port}/tls-test"
    async with open_metadata_store(url, tls_settings(tls_files)) as store:
        await store.put("/a", b"over tls", -1)
        found = await store.get("/a")
        assert found is not None
        assert found.value == b"over tls"


# kazoo's create_tcp_connection does not close the SSL socket whose handshake the server refused (it leaks
# to the garbage collector with a ResourceWarning); the leak is kazoo's, and this test expects the refusal.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_without_the_client_certificate_no_session(
    tls_zookeeper: TlsZooKeeper, tls_files: TlsFiles
) -> None:
    url = f"zk:127.0.0.1:{tls_zookeeper.secure_port}/tls-test"
    settings = tls_settings(
        tls_files, zk_tls_certificate_file=None, zk_tls_key_file=None, operation_timeout_ms=1_500
    )
    with pytest.raises(StoreUnavailableError):
        async with open_metadata_store(url, settings):
            pass
    gc.collect()  # collect kazoo's leaked sockets while their ResourceWarning is ignored


def test_tls_settings_validation(tls_files: TlsFiles) -> None:
    with pytest.raises(ValueError, match="go together"):
        MetadataStoreSettings(zk_tls_enabled=True, zk_tls_certificate_file=tls_files.client_cert)
    with pytest.raises(ValueError, match="zk_tls_enabled is off"):
        MetadataStoreSettings(zk_tls_trust_certs_file=tls_files.ca_cert)
    assert MetadataStoreSettings().kazoo_tls_options() == {}
    options = tls_settings(tls_files, zk_tls_hostname_verification=False).kazoo_tls_options()
    assert options["use_ssl"] is True
    assert options["ca"] == str(tls_files.ca_cert)
    assert options["check_hostname"] is False
