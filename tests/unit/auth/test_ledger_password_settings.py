"""The brokers' ledger password (``managed_ledger_password``) and digest type: forms, default, secrecy."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from magnetar.admin.processes.config import load_settings, render_json, render_toml
from magnetar.bookkeeper.protocol.digest import DigestType
from magnetar.bookkeeper.runtime.auth.errors import KeyConfigError
from magnetar.broker.settings import LEDGER_PASSWORD_BYTES, BrokerSettings


def test_the_password_as_text_or_from_a_file(tmp_path: Path) -> None:
    assert BrokerSettings(managed_ledger_password="pa55").managed_ledger_settings().password == b"pa55"
    secret = tmp_path / "ledger.password"
    secret.write_bytes(b"from-a-file\n")
    settings = BrokerSettings(managed_ledger_password=secret.as_uri())
    assert settings.managed_ledger_settings().password == b"from-a-file"
    assert BrokerSettings(managed_ledger_password="").managed_ledger_settings().password == b""
    missing = BrokerSettings(managed_ledger_password="file:///no/such/password")
    with pytest.raises(KeyConfigError, match="managed_ledger_password: cannot read /no/such/password"):
        missing.managed_ledger_settings()


def test_unset_a_random_password_is_drawn_per_broker_start() -> None:
    settings = BrokerSettings()
    first = settings.managed_ledger_settings().password
    second = settings.managed_ledger_settings().password
    assert len(first) == len(second) == LEDGER_PASSWORD_BYTES
    assert first != second
    seeded = settings.managed_ledger_settings(random.Random(7)).password  # the simulation's seam
    assert seeded == settings.managed_ledger_settings(random.Random(7)).password


def test_digest_types_by_pulsars_names() -> None:
    assert BrokerSettings().managed_ledger_settings().digest_type is DigestType.CRC32C
    for name, digest in (("CRC32", DigestType.CRC32), ("MAC", DigestType.HMAC), ("DUMMY", DigestType.DUMMY)):
        settings = BrokerSettings(managed_ledger_digest_type=name)
        assert settings.managed_ledger_settings().digest_type is digest


def test_the_password_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGNETAR_MANAGED_LEDGER_PASSWORD", "do-not-print")
    loaded = load_settings(BrokerSettings, {}, None)
    assert loaded.settings.ledger_password() == b"do-not-print"
    for shown in (render_json(loaded), render_toml(loaded), repr(loaded.settings)):
        assert "do-not-print" not in shown
    assert "do-not-print" not in repr(loaded.settings.managed_ledger_settings())
