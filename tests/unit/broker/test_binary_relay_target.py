"""Where a relayed Pulsar binary connection may go: only to an address a live broker registered."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.sessions.binary_relay import BinaryRelay, RelayRefused, RelayTarget, broker_address

LIVE = {
    url: url for url in ("pulsar://10.0.0.1:6650", "pulsar+ssl://10.0.0.1:6651", "pulsar://10.0.0.2:6650")
} | {"pulsar://203.0.113.9:16650": "pulsar://10.0.0.2:6650"}  # broker 2's "external" listener


@pytest.mark.parametrize(
    ("named", "url", "tls"),
    [
        ("10.0.0.2:6650", "pulsar://10.0.0.2:6650", False),  # what the C++ client sends: no scheme
        ("pulsar://10.0.0.1:6650", "pulsar://10.0.0.1:6650", False),
        ("10.0.0.1:6651", "pulsar+ssl://10.0.0.1:6651", True),
        ("pulsar+ssl://10.0.0.1:6651", "pulsar+ssl://10.0.0.1:6651", True),
        (
            "203.0.113.9:16650",
            "pulsar://10.0.0.2:6650",
            False,
        ),  # a listener's address: the broker's own dialled
    ],
)
def test_a_live_broker_is_found_by_url_or_host_port(named: str, url: str, tls: bool) -> None:
    target = RelayTarget.among(named, LIVE)
    assert (target.url, target.tls) == (url, tls)
    host, port = broker_address(url).rsplit(":", 1)
    assert (target.host, target.port) == (host, int(port))


@pytest.mark.parametrize(
    "named",
    [
        "10.0.0.3:6650",
        "http://10.0.0.1:6650",  # a live broker's host:port, but not a binary URL
        "ftp://10.0.0.2:6650",
        "10.0.0.1",
        "",
        "\u202e10.0.0.1:6650",
        "10.0.0.1:6650\x00",
        "x" * 100_000,
    ],
)
def test_anything_else_is_refused_and_named_briefly(named: str) -> None:
    with pytest.raises(RelayRefused, match="is not a live broker of this cluster") as refused:
        RelayTarget.among(named, LIVE)
    assert len(str(refused.value)) < 300


@given(st.text(max_size=200))
def test_no_string_reaches_an_address_no_broker_registered(named: str) -> None:
    try:
        target = RelayTarget.among(named, LIVE)
    except RelayRefused:
        return
    assert target.url in LIVE.values()


async def test_connects_in_progress_count_against_the_bound_and_a_failed_one_frees_its_place() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    relay = BinaryRelay(connections_max=1, connect_timeout_s=5.0, ssl_context=None)
    live = RelayTarget.among(
        f"127.0.0.1:{port}", {f"pulsar://127.0.0.1:{port}": f"pulsar://127.0.0.1:{port}"}
    )
    owner = await relay.open(live)
    assert relay.connections == 1
    with pytest.raises(RelayRefused, match="binary_proxy_connections_max=1"):
        await relay.open(live)
    await owner.aclose()
    relay.connections = 0  # as relay() does when a relayed connection ends
    listener.close()
    with pytest.raises(RelayRefused, match="could not reach the owner"):
        await relay.open(live)  # nothing listens there any more
    assert relay.connections == 0
    tls = RelayTarget.among(
        f"127.0.0.1:{port}", {f"pulsar+ssl://127.0.0.1:{port}": f"pulsar+ssl://127.0.0.1:{port}"}
    )
    with pytest.raises(RelayRefused):
        await relay.open(tls)
    assert relay.connections == 0
