"""Broker failover with real processes: ZooKeeper, three ``magnetar bookie`` and two ``magnetar broker``.

A producer publishes continuously to the broker that owns the topic; that broker is SIGKILLed. Its ZooKeeper
session expires, the other broker takes the bundle on the next request (the producer reconnects through the
surviving broker, which answers 503 - never naming the dead owner - while its ephemeral node still exists),
recovering - and so fencing - the managed ledger's last ledger. At the end a fresh subscription reads the
topic from the start: every acknowledged message is there exactly once, in the order it was produced.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import websocket
from fixtures.broker import b64, recv_json, send_json, unb64
from fixtures.broker_processes import ProcessCluster

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

SESSION_TIMEOUT_MS = 3000
LOADED_MACHINE_FACTOR = 3
"""How much later than its settings say a process may act on a 2-core machine running other suites."""
TAKEOVER_DEADLINE_S = LOADED_MACHINE_FACTOR * SESSION_TIMEOUT_MS / 1000 + 30
"""From the kill to the survivor naming itself: the dead owner's session expires (metadata_session_timeout_ms,
on a busy machine late), then the survivor takes the bundle, recovering the ledger; 30 s for that recovery and
the reconnection, as the failover-gap bound below."""
READ_BACK_DEADLINE_S = 60.0
"""How long the fresh subscription may take to read back the ~520 messages (it stops as soon as it has every
acknowledged one)."""
TOPIC = "persistent/public/default/failover"


def _connect_producer(urls: list[str], deadline: float) -> websocket.WebSocket:
    while True:
        for url in urls:
            try:
                return websocket.create_connection(f"{url}/ws/v2/producer/{TOPIC}", timeout=10)
            except (OSError, websocket.WebSocketException):
                continue
        if time.monotonic() > deadline:
            raise AssertionError("no broker accepted the producer again")
        time.sleep(0.1)


def test_every_acknowledged_message_survives_the_owner_being_killed(
    zookeeper_url: str, tmp_path: Path
) -> None:
    cluster = ProcessCluster(zookeeper_url, tmp_path)
    env = {"MAGNETAR_METADATA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS)}
    quorum = ["--ensemble-size", "3", "--write-quorum", "2", "--ack-quorum", "2"]
    producer: websocket.WebSocket | None = None
    try:
        for index in range(3):
            cluster.start_bookie(index)
        brokers = [cluster.start_broker(index, *quorum, env=env) for index in range(2)]
        urls = [f"ws://127.0.0.1:{b.ready['port']}" for b in brokers]

        acked: list[str] = []
        ack_times: list[float] = []
        sequence = 0
        producer = _connect_producer(urls[:1], time.monotonic() + TAKEOVER_DEADLINE_S)
        # publish through the first broker (it takes the bundle), then kill it while messages are in flight
        for _ in range(300):
            send_json(producer, {"payload": b64(f"p-{sequence}"), "context": str(sequence)})
            sequence += 1
            ack = recv_json(producer)
            assert ack["result"] == "ok"
            acked.append(f"p-{ack['context']}")
            ack_times.append(time.monotonic())
        for _ in range(20):  # in flight when the owner dies: their outcome is unknown
            send_json(producer, {"payload": b64(f"p-{sequence}"), "context": str(sequence)})
            sequence += 1
        brokers[0].kill()
        killed_at = time.monotonic()
        deadline = killed_at + TAKEOVER_DEADLINE_S
        last_old_ack = ack_times[-1]
        try:
            while True:
                ack = recv_json(producer)
                if ack.get("result") == "ok":
                    acked.append(f"p-{ack['context']}")
                    last_old_ack = time.monotonic()
        except (OSError, websocket.WebSocketException, json.JSONDecodeError):
            pass
        producer.close()

        # until the dead owner's session expires its ownership node remains; the survivor's lookup must
        # never name it (503: retry), then names itself
        dead_url = urls[0].replace("ws://", "http://")
        lookup = f"{urls[1].replace('ws://', 'http://')}/lookup/v2/topic/{TOPIC}"
        answers: list[int] = []
        while True:
            answer = httpx.get(lookup, timeout=10)
            answers.append(answer.status_code)
            assert answer.status_code in (200, 503), answer.text
            if answer.status_code == 200:
                assert answer.json()["httpUrl"] != dead_url, "the lookup named the dead owner"
                break
            assert time.monotonic() < deadline, (
                f"no owner {TAKEOVER_DEADLINE_S:g} s after the kill (metadata_session_timeout_ms "
                f"{SESSION_TIMEOUT_MS}): lookups answered {answers}"
            )
            time.sleep(0.2)

        # reconnect through the survivor and go on publishing
        producer = _connect_producer(urls[1:], deadline)
        first_new_ack = 0.0
        for _ in range(200):
            send_json(producer, {"payload": b64(f"p-{sequence}"), "context": str(sequence)})
            sequence += 1
            ack = recv_json(producer)
            assert ack["result"] == "ok", ack
            first_new_ack = first_new_ack or time.monotonic()
            acked.append(f"p-{ack['context']}")
        producer.close()
        gap = first_new_ack - last_old_ack
        print(f"failover gap {gap:.2f}s (kill -> first new ack {first_new_ack - killed_at:.2f}s)")
        assert gap < SESSION_TIMEOUT_MS / 1000 + 30

        # a fresh subscription sees every acknowledged message exactly once, in production order
        consumer = websocket.create_connection(
            f"{urls[1]}/ws/v2/consumer/{TOPIC}/verify?subscriptionInitialPosition=Earliest", timeout=10
        )
        acked_set = set(acked)
        try:
            # every stored message comes before the last acknowledged one (nothing was published after it):
            # read until each acknowledged message has arrived
            seen: list[str] = []
            read_deadline = time.monotonic() + READ_BACK_DEADLINE_S
            while not acked_set <= set(seen):
                consumer.settimeout(max(0.1, read_deadline - time.monotonic()))
                try:
                    message = recv_json(consumer)
                except websocket.WebSocketTimeoutException:
                    missing = len(acked_set - set(seen))
                    raise AssertionError(
                        f"{missing} acknowledged messages not read back within {READ_BACK_DEADLINE_S:g} s"
                    ) from None
                seen.append(unb64(message["payload"]).decode())
                send_json(consumer, {"messageId": message["messageId"]})
            consumer.settimeout(1)  # nothing may follow (a duplicate would): a second of silence checks it
            try:
                while True:
                    seen.append(unb64(recv_json(consumer)["payload"]).decode())
            except websocket.WebSocketTimeoutException:
                pass
        finally:
            consumer.close()
        delivered_acked = [p for p in seen if p in acked_set]
        assert delivered_acked == acked  # each once, in order
        numbers = [int(p.removeprefix("p-")) for p in seen]
        assert numbers == sorted(numbers)  # unacknowledged ones that were stored keep the order too
    finally:
        if producer is not None:
            producer.shutdown()
        cluster.close()
