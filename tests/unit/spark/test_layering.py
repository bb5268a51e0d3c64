"""The Spark source is a client of the REST API: Spark workers import it without the server's stack."""

from __future__ import annotations

import subprocess
import sys

SERVER_SIDE = ("trio", "pydantic", "h11", "wsproto", "kazoo", "rocksdict", "magnetar.managed_ledger",
               "magnetar.bookkeeper", "magnetar.gc", "magnetar.admin.rest")  # fmt: skip


def test_the_source_imports_only_the_broker_formats() -> None:
    probe = (
        "import sys, magnetar.admin.spark\n"
        f"print('|'.join(sorted(m for m in sys.modules if m.startswith({SERVER_SIDE!r}))))\n"
        "print('|'.join(sorted(m for m in sys.modules if m.startswith('magnetar.broker.'))))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    server_side, broker = result.stdout.splitlines()
    # of the storage layers, only the stored entry's prefix (standard library only) and its package's face
    assert server_side.split("|") == ["magnetar.managed_ledger", "magnetar.managed_ledger.entry_prefix"]
    assert broker.split("|") == [
        "magnetar.broker.wire",
        "magnetar.broker.wire.date_format",  # the wire formats' face loads all of them but the frame codec
        "magnetar.broker.wire.entry_format",
        "magnetar.broker.wire.errors",
        "magnetar.broker.wire.listeners",  # standard library only
        "magnetar.broker.wire.message_id",
        "magnetar.broker.wire.strict_input",
        "magnetar.broker.wire.topic_name",
    ]
