"""Why a ZooKeeper gave no session, in a user's words (:func:`why_unreachable`, used in the error that
``no ZooKeeper session ... within N ms`` raises): nothing listening, a name that does not resolve, or a
server that accepts connections but is not the ZooKeeper expected."""

from __future__ import annotations

import socket

from magnetar.bookkeeper.metadata.zk_store import why_unreachable


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_nothing_listening_is_a_refused_connection() -> None:
    port = free_port()
    assert await why_unreachable(f"127.0.0.1:{port}") == (
        f"127.0.0.1:{port}: connection refused: nothing listens on that port (is ZooKeeper running?)"
    )


async def test_a_name_that_does_not_resolve_is_named() -> None:
    assert await why_unreachable("no-such-host.invalid:2181") == (
        "no-such-host.invalid:2181: the host name 'no-such-host.invalid' does not resolve"
    )


async def test_a_listener_that_is_not_zookeeper_and_every_server_of_the_list() -> None:
    port = free_port()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        listening = other.getsockname()[1]
        found = await why_unreachable(f"127.0.0.1:{listening}, 127.0.0.1:{port}")
    first, second = found.split("; ")
    assert first.startswith(
        f"127.0.0.1:{listening}: a server accepts connections but gave no ZooKeeper session"
    )
    assert second.startswith(f"127.0.0.1:{port}: connection refused")
