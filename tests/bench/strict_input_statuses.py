"""What a fresh ``magnetar standalone`` (authentication on) answers to numbers Java would not read and to
names holding control or bidirectional formatting characters: one line per request, status and reason.

    .venv/bin/python tests/bench/strict_input_statuses.py [--pythonpath DIR]

``--pythonpath`` runs another build's standalone (a directory holding its ``magnetar/`` package), for the
figures before. Every process started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import httpx
import websocket

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.auth import TokenKeys
from fixtures.forged_acks import secure_standalone_args
from fixtures.processes import MagnetarProcess

from magnetar.bookkeeper.runtime.auth.keys import create_secret_key

TOPIC = "persistent/public/default/strict"
SUB = f"/admin/v2/{TOPIC}/subscription/sub"
COUNTS = ["1_0", "%D9%A1%D9%A0", "%EF%BC%91%EF%BC%90", "%2010", "9223372036854775808"]
NAMES = [
    ("consumer", f"/ws/v2/consumer/{TOPIC}/sub?consumerName=a%00b"),
    ("consumer", f"/ws/v2/consumer/{TOPIC}/sub?consumerName=a%0Ab"),
    ("producer", f"/ws/v2/producer/{TOPIC}?producerName=evil%E2%80%AEgnp"),
    ("subscription", f"/ws/v2/consumer/{TOPIC}/x%E2%80%AEy"),
]


def upgrade(url: str, token: str) -> str:
    try:
        websocket.create_connection(url, timeout=10, header=[f"Authorization: Bearer {token}"]).close()
    except websocket.WebSocketBadStatusException as exc:
        return f"{exc.status_code} {(exc.resp_body or b'').decode()[:110]}"
    return "101 (accepted)"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pythonpath", default="", help="another build's package (before figures)")
    args = parser.parse_args()
    keys = TokenKeys(create_secret_key("HS256"), b"", b"", b"", b"")  # secret-key tokens only
    with tempfile.TemporaryDirectory(prefix="strict-input-") as tmp:
        argv = secure_standalone_args(Path(tmp), keys.secret)
        process = MagnetarProcess("standalone", argv, Path(tmp), {"PYTHONPATH": args.pythonpath})
        process.start(timeout_s=60)
        try:
            http_url = str(process.ready["httpUrl"])
            admin = keys.token("admin")
            client = httpx.Client(base_url=http_url, headers={"Authorization": f"Bearer {admin}"}, timeout=10)
            client.put(f"/admin/v2/{TOPIC}")
            client.put(SUB)
            for count in COUNTS:
                answer = client.post(f"{SUB}/skip/{count}")
                print(f"POST .../skip/{count}: {answer.status_code} {answer.text[:110]}")
            answer = client.put(f"/admin/v2/{TOPIC}/subscription/x%E2%80%AEy")
            print(f"PUT .../subscription/x%E2%80%AEy: {answer.status_code} {answer.text[:110]}")
            ws_url = http_url.replace("http://", "ws://")
            for kind, path in NAMES:
                print(f"{kind} upgrade {path}: {upgrade(ws_url + path, admin)}")
        finally:
            process.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
