"""What a newcomer's mistakes get from a tree's ``magnetar``: run against two trees to compare (before/after).

Usage: ``python tests/bench/newcomer_answers.py PATH/TO/.venv/bin/magnetar``. Prints one Markdown row per
case: the status (or exit code) and the reason a user reads. Cases: a standalone whose bookie port is taken,
then retried with another ``--bookie-port`` on the same data directory; and, on a standalone with
authentication on, WebSocket upgrades with malformed paths, ``encryptionKeys``, HTTP mistakes and a bookie's
metrics page without a token. Every process it starts is stopped by pid.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}

PRODUCER = "/ws/v2/producer/persistent/public/default/t"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def last_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if " ERROR " in line]
    return lines[-1].split(" failed: ", 1)[-1][:300] if lines else "(no error line)"


def row(case: str, status: object, reason: str) -> None:
    print(f"| {case} | {status} | {reason.replace('|', '/')[:300]} |")


def port_cases(magnetar: str, tmp: Path) -> None:
    data = tmp / "ports"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        args = [magnetar, "standalone", "--data-dir", str(data), "--http-port", "0"]
        first = subprocess.run(
            [*args, "--bookie-port", str(busy)], check=False, capture_output=True, text=True, timeout=90
        )
    row("standalone, bookie port taken", f"exit {first.returncode}", last_error(first.stderr))
    retry = subprocess.Popen(
        [*args, "--bookie-port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert retry.stdout is not None
    line = retry.stdout.readline()
    if line:
        row("retry, another --bookie-port, same data dir", "ready", line.strip())
        retry.send_signal(signal.SIGTERM)
    _, err = retry.communicate(timeout=90)
    if not line:
        row("retry, another --bookie-port, same data dir", f"exit {retry.returncode}", last_error(err))


def token(magnetar: str, key: Path, subject: str) -> str:
    done = subprocess.run(
        [magnetar, "tokens", "create", "--secret-key", key.as_uri(), "--subject", subject],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def http_cases(magnetar: str, tmp: Path) -> None:
    key = tmp / "secret.key"
    key.write_bytes(secrets.token_bytes(32))
    admin = {"Authorization": f"Bearer {token(magnetar, key, 'admin')}"}
    process = subprocess.Popen(
        [
            magnetar, "standalone", "--data-dir", str(tmp / "auth"), "--http-port", "0",
            "--bookie-port", str(free_port()),
            "--authentication-enabled", "--token-secret-key", key.as_uri(), "--super-user-roles", "admin",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = json.loads(process.stdout.readline())["httpUrl"]
        with httpx.Client(base_url=url, timeout=30) as http:
            client_side = base64.b64encode(json.dumps({"k": {"keyValue": "AAE="}}).encode()).decode()
            for case, path in (
                ("consumer path without subscription", "/ws/v2/consumer/persistent/public/default/t"),
                ("consumer path, trailing slash", "/ws/v2/consumer/persistent/public/default/t/"),
                ("v1 consumer path", "/ws/consumer/persistent/public/default/t/sub"),
                ("encryptionKeys=k1", f"{PRODUCER}?encryptionKeys=k1"),
                ("encryptionKeys, client-side form", f"{PRODUCER}?encryptionKeys={client_side}"),
            ):  # fmt: skip
                answer = http.get(path, headers={**UPGRADE, **admin})
                row(case, answer.status_code, answer.json().get("reason", answer.text))
            for case, method, path in (
                ("GET without upgrade on a WebSocket path", "GET", PRODUCER),
                ("unknown path", "GET", "/admin/v2/tenantz"),
                ("wrong method", "DELETE", "/admin/v2/clusters"),
            ):  # fmt: skip
                answer = http.request(method, path, headers=admin)
                row(case, answer.status_code, answer.json()["reason"])
            bookie_id = http.get("/api/v1/bookie/info", headers=admin).json()["bookieId"]
            scraped = http.get(f"/bookies/{bookie_id}/metrics")
            row("/bookies/<id>/metrics without a token (shipped settings)", scraped.status_code, "")
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=90)


def main() -> None:
    magnetar = sys.argv[1]
    print("| case | status | reason |\n|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        port_cases(magnetar, Path(tmp))
        http_cases(magnetar, Path(tmp))


if __name__ == "__main__":
    main()
