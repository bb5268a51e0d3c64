"""``open_listeners``: a port that cannot be had is reported with the server, address, reason and setting."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from magnetar.bookkeeper.runtime.listen import ListenError, open_listeners


async def test_a_busy_port_names_the_server_the_port_and_the_setting() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ListenError) as caught:
            await open_listeners(port, "127.0.0.1", service="broker HTTP", setting="http_port")
    failure = caught.value
    assert (failure.errno, failure.port, failure.setting) == (errno.EADDRINUSE, port, "http_port")
    assert str(failure) == (
        f"broker HTTP cannot listen on 127.0.0.1:{port}: the port is already in use by this process itself "
        f"(pid {os.getpid()}): two of its servers were given the same port [errno {errno.EADDRINUSE}]"
    )
    assert isinstance(failure, OSError)  # callers that handled OSError still do


async def test_a_bind_address_that_does_not_resolve_is_the_bind_address_settings_fault() -> None:
    with pytest.raises(ListenError) as caught:
        await open_listeners(0, "no-such-host.invalid", service="bookie protocol", setting="port")
    assert caught.value.setting == "bind_address"
    assert str(caught.value).startswith("bookie protocol cannot listen: address 'no-such-host.invalid'")


async def test_a_renamed_failure_keeps_the_cause_and_adds_the_note() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ListenError) as caught:
            await open_listeners(port, "127.0.0.1", service="bookie protocol", setting="port")
    renamed = caught.value.renamed("bookie 2 (bookie protocol)", "bookie_port", "bookie 2 listens on +2")
    assert (renamed.setting, renamed.errno, renamed.port) == ("bookie_port", errno.EADDRINUSE, port)
    assert str(renamed).startswith(f"bookie 2 (bookie protocol) cannot listen on 127.0.0.1:{port}:")
    assert str(renamed).endswith("(bookie 2 listens on +2)")


async def test_a_free_port_gives_listeners() -> None:
    listeners = await open_listeners(0, "127.0.0.1", service="test", setting="port")
    try:
        assert listeners[0].socket.getsockname()[1] > 0
    finally:
        for listener in listeners:
            await listener.aclose()
