"""``magnetar tokens``: the key and token workflow of ``pulsar tokens``, in process and as a process."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.admin.cli.main import main
from magnetar.bookkeeper.runtime.auth.keys import private_key, public_key, secret_key
from magnetar.bookkeeper.runtime.auth.tokens import TokenVerifier
from magnetar.bookkeeper.runtime.clock import SystemClock


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["tokens", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_secret_key_workflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key_file = tmp_path / "secret.key"
    assert run(capsys, "create-secret-key", "--output", str(key_file))[0] == 0
    assert len(key_file.read_bytes()) == 32
    assert key_file.stat().st_mode & 0o777 == 0o600
    code, token, _ = run(
        capsys, "create", "--secret-key", key_file.as_uri(), "--subject", "admin", "-e", "1h"
    )
    assert code == 0
    token = token.strip()
    verified = TokenVerifier(secret_key(key_file.read_bytes()), clock=SystemClock()).verify(token)
    assert verified.role == "admin"
    assert verified.expires_at_ms is not None
    code, out, _ = run(capsys, "show", token)
    header, _, claims = out.partition("---\n")
    assert json.loads(header)["alg"] == "HS256"
    assert json.loads(claims)["sub"] == "admin"
    code, out, _ = run(capsys, "validate", "-sk", key_file.as_uri(), token)
    assert (code, json.loads(out)["sub"]) == (0, "admin")


def test_base64_secret_key_and_data_urls(capsys: pytest.CaptureFixture[str]) -> None:
    code, encoded, _ = run(capsys, "create-secret-key", "--base64", "-a", "HS512")
    assert code == 0
    assert len(base64.b64decode(encoded)) == 64
    code, token, _ = run(capsys, "create", "-sk", f"data:;base64,{encoded}", "-s", "bob")
    assert code == 0
    code, out, _ = run(capsys, "validate", "-sk", encoded, token.strip())
    assert (code, json.loads(out)["sub"]) == (0, "bob")


@pytest.mark.parametrize(("algorithm", "key_format"), [("RS256", "der"), ("ES256", "pem")])
def test_key_pair_workflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], algorithm: str, key_format: str
) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    code = run(
        capsys,
        "create-key-pair",
        "-a",
        algorithm,
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
        "--format",
        key_format,
    )[0]
    assert code == 0
    assert private_key(private.read_bytes()).signing_algorithm == algorithm
    assert public_key(public.read_bytes()).kind == "public"
    code, token, _ = run(capsys, "create", "-pk", private.as_uri(), "-s", "client")
    assert code == 0
    code, out, _ = run(capsys, "validate", "-pk", public.as_uri(), token.strip())
    assert (code, json.loads(out)["sub"]) == (0, "client")


def test_failures_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(capsys, "create", "-sk", "file:///no/such/key", "-s", "x")
    assert code == 1
    assert "cannot read /no/such/key" in err
    key = base64.b64encode(bytes(32)).decode()
    code, _, err = run(capsys, "create", "-sk", key, "-s", "x", "-e", "soon")
    assert code == 2
    assert "--expiry-time" in err
    code, _, err = run(capsys, "validate", "-sk", key, "a.b.c")
    assert code == 1
    assert "invalid token" in err
    monkeypatch.delenv("TOKEN", raising=False)
    code, _, err = run(capsys, "show")
    assert code == 2
    assert "$TOKEN" in err
    code, _, err = run(capsys, "show", "not-a-token")
    assert code == 1


def test_token_from_environment_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = base64.b64encode(bytes(range(32))).decode()
    token = run(capsys, "create", "-sk", key, "-s", "env-role")[1].strip()
    monkeypatch.setenv("TOKEN", token)
    code, out, _ = run(capsys, "validate", "-sk", key)
    assert json.loads(out)["sub"] == "env-role"
    path = tmp_path / "token.txt"
    path.write_text(token + "\n")
    code, out, _ = run(capsys, "validate", "-sk", key, "--token-file", str(path))
    assert (code, json.loads(out)["sub"]) == (0, "env-role")


def test_the_installed_command(tmp_path: Path) -> None:
    key_file = tmp_path / "k"
    magnetar = [sys.executable, "-m", "magnetar.admin.cli", "tokens"]
    subprocess.run([*magnetar, "create-secret-key", "-o", str(key_file)], check=True, timeout=60)
    result = subprocess.run(
        [*magnetar, "create", "-sk", key_file.as_uri(), "-s", "proc"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        TokenVerifier(secret_key(key_file.read_bytes()), clock=SystemClock())
        .verify(result.stdout.strip())
        .role
        == "proc"
    )
