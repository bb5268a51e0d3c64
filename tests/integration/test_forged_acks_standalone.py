"""A consume role's acks with forged batch sizes, against a real ``magnetar standalone`` with authentication
on (shipped settings; the consumer holds an ordinary token with the consume permission only).

Before, the broker built its batch-index bookkeeping from the size the client put in the id: one 60-byte
ack claiming 10,000,000 messages grew its RSS by ~555 MiB, kept after the client left, 2^31 - 1 meant an
out-of-memory kill, and the backlog counted acks of messages that were never stored. Now sizes come from what
the broker stored: the server's RSS barely moves, exactly the two stored messages named are acknowledged,
and the server stays up (tests/bench/RESULTS.md has the figures).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures import forged_acks
from fixtures.auth import TokenKeys
from fixtures.processes import ProcessGroup
from fixtures.ws_attacks import server_alive

pytestmark = [pytest.mark.processes, pytest.mark.slow]

GROWTH_MIB_MAX = 20
"""What the attack may add to the server's RSS (sessions, the stats requests, allocator noise)."""


def test_forged_batch_sizes_cost_no_memory_and_acknowledge_only_stored_messages(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    process = magnetar_processes.add(
        "standalone", forged_acks.secure_standalone_args(tmp_path, token_keys.secret)
    )
    setup = forged_acks.Setup.of(
        process.ready, token_keys.token("admin"), token_keys.token(forged_acks.CONSUMER_ROLE)
    )
    result, figures = forged_acks.attack(setup, process.pid)
    print(result.line(), figures)
    assert process.is_running(), process.log_tail()
    assert server_alive("127.0.0.1", int(process.ready["port"])) < 10
    assert figures["backlog_before"] == 6
    assert figures["backlog_after"] == 4, figures  # batch indexes 0 and 1 of the batch entry, nothing else
    assert result.sent_units >= 60
    assert result.growth_mib < GROWTH_MIB_MAX, result.line()
