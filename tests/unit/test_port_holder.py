"""``port_holder``: the process that listens on a port, from ``/proc`` (Linux)."""

from __future__ import annotations

import os
import socket
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.runtime.port_holder import listening_inodes, port_holder

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(port: int, state: str, inode: str) -> str:
    timers = "00000000:00000000 00:00000000 00000000"
    return f"   0: 0100007F:{port:04X} 00000000:0000 {state} {timers}  0  0 {inode}\n"


def test_only_listening_sockets_on_the_port_count() -> None:
    table = (
        HEADER
        + row(8080, "0A", "111")
        + row(8080, "01", "222")
        + row(8081, "0A", "333")
        + row(8080, "0A", "0")
    )
    assert listening_inodes(table, 8080) == {"111"}


@given(st.text(max_size=400))
def test_any_table_text_parses_without_error(text: str) -> None:
    assert isinstance(listening_inodes(HEADER + text, 8080), set)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_listening_socket_of_this_process_is_found() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        found = port_holder(port)
    assert found is not None
    assert found.pid == os.getpid()
    assert "by this process itself" in found.describe()


def test_a_port_nobody_listens_on_has_no_holder() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening
    assert port_holder(port) is None
    assert port_holder(port, proc="/nonexistent") is None
