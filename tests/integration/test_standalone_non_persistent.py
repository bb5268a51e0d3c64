"""Non-persistent topics on a real ``magnetar standalone``: Node's ``ws`` running Pulsar's documented
WebSocket consumer and producer examples against a ``non-persistent`` topic, a Python ``websocket-client``
reader beside them, and the admin requests Pulsar's Java client sends for ``topics().getList(ns)`` and
``getStats``.

``ws`` comes from the npm registry (installed once per run into a temporary folder); without ``node`` and
``npm`` on the machine the Node part cannot run and the test says so.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import websocket
from fixtures.processes import ProcessGroup

from magnetar.broker.wire.message_id import MessageId

pytestmark = [pytest.mark.processes, pytest.mark.slow]

NODE_TIMEOUT_S = 60

# Pulsar's documented Node.js examples (the WebSocket API page), with the topic and the count as arguments.
CONSUMER_JS = """
const WebSocket = require('ws');
const [topic, count] = [process.argv[2], Number(process.argv[3])];
const ws = new WebSocket(topic);
let received = 0;
ws.on('open', function() { console.log('open'); });
ws.on('message', function(message) {
    var receiveMsg = JSON.parse(message);
    console.log('payload:' + Buffer.from(receiveMsg.payload, 'base64').toString()
        + ' id:' + receiveMsg.messageId);
    var ackMsg = {"messageId" : receiveMsg.messageId};
    ws.send(JSON.stringify(ackMsg));
    if (++received === count) { ws.close(); }
});
"""
PRODUCER_JS = """
const WebSocket = require('ws');
const [topic, count] = [process.argv[2], Number(process.argv[3])];
const ws = new WebSocket(topic);
let acked = 0;
ws.on('open', function() {
    for (let i = 0; i < count; i++) {
        var message = {
            "payload" : Buffer.from("Hello World " + i).toString('base64'),
            "properties": { "key1" : "value1", "key2" : "value2" },
            "context" : String(i)
        };
        ws.send(JSON.stringify(message));
    }
});
ws.on('message', function(message) {
    console.log('received ack: ' + message);
    if (++acked === count) { ws.close(); }
});
"""


@pytest.fixture(scope="module")
def node_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run Pulsar's Node.js WebSocket examples")
    folder = tmp_path_factory.mktemp("node-ws")
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), "ws@8"],
        check=True,
        timeout=180,
        capture_output=True,
    )
    (folder / "consumer.js").write_text(CONSUMER_JS)
    (folder / "producer.js").write_text(PRODUCER_JS)
    return folder


def magnetar_admin(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.admin.cli", "admin", "--admin-url", url, "--output", "json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def start_standalone(group: ProcessGroup, data_dir: Path) -> str:
    process = group.add("standalone", ["standalone", "--data-dir", str(data_dir), "--http-port", "0"])
    assert process.ready["event"] == "standalone-ready"
    return str(process.ready["httpUrl"])


def test_node_examples_on_a_non_persistent_topic(
    magnetar_processes: ProcessGroup, tmp_path: Path, node_ws: Path
) -> None:
    http_url = start_standalone(magnetar_processes, tmp_path / "data")
    ws_url = http_url.replace("http://", "ws://")
    topic = "non-persistent/public/default/node-np"
    count = 5
    reader = websocket.create_connection(f"{ws_url}/ws/v2/reader/{topic}", timeout=10)
    consumer = subprocess.Popen(
        ["node", "consumer.js", f"{ws_url}/ws/v2/consumer/{topic}/node-sub", str(count)],
        cwd=node_ws,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == "open"  # subscribed before anything is published
        produced = subprocess.run(
            ["node", "producer.js", f"{ws_url}/ws/v2/producer/{topic}", str(count)],
            cwd=node_ws,
            capture_output=True,
            text=True,
            timeout=NODE_TIMEOUT_S,
            check=True,
        )
        acks = [json.loads(line.removeprefix("received ack: ")) for line in produced.stdout.splitlines()]
        assert [a["result"] for a in acks] == ["ok"] * count
        assert sorted(a["context"] for a in acks) == [str(i) for i in range(count)]
        out, err = consumer.communicate(timeout=NODE_TIMEOUT_S)
        assert consumer.returncode == 0, err
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    lines = out.splitlines()
    assert [line.split(" id:")[0] for line in lines] == [f"payload:Hello World {i}" for i in range(count)]
    assert {MessageId.from_base64(line.split(" id:")[1]) for line in lines} == {MessageId(0, 0, -1)}
    read = [json.loads(reader.recv()) for _ in range(count)]
    reader.close()
    assert [base64.b64decode(m["payload"]).decode() for m in read] == [
        f"Hello World {i}" for i in range(count)
    ]
    assert read[0]["properties"] == {"key1": "value1", "key2": "value2"}

    with httpx.Client(base_url=http_url, timeout=30) as admin:
        # topics().getList("public/default"): both domains, merged by the client
        listed = [
            *admin.get("/admin/v2/persistent/public/default").json(),
            *admin.get("/admin/v2/non-persistent/public/default").json(),
        ]
        assert "non-persistent://public/default/node-np" in listed  # loaded until unloaded or deleted
        # getStats(topic): the request the Java client builds, read as it reads NonPersistentTopicStats
        stats = admin.get(
            "/admin/v2/non-persistent/public/default/node-np/stats",
            params={
                "getPreciseBacklog": "false",
                "subscriptionBacklogSize": "true",
                "getEarliestTimeInBacklog": "false",
                "excludePublishers": "false",
                "excludeConsumers": "false",
            },
        )
        assert stats.status_code == 200
        body = stats.json()
        assert body["msgInCounter"] == count
        assert body["subscriptions"]["node-sub"]["msgOutCounter"] == count
        assert body["subscriptions"]["node-sub"]["consumers"] == []
        assert isinstance(body["msgDropRate"], float)
        assert isinstance(body["subscriptions"]["node-sub"]["msgDropRate"], float)
        # pulsar-admin's verbs through Magnetar's CLI: `topics list` merges both domains, `topics stats`
        listed_by_cli = magnetar_admin(http_url, "topics", "list", "public/default")
        assert "non-persistent://public/default/node-np" in json.loads(listed_by_cli)
        cli_stats = magnetar_admin(http_url, "topics", "stats", "non-persistent://public/default/node-np")
        assert json.loads(cli_stats)["msgInCounter"] == count
        deleted = admin.delete(
            "/admin/v2/non-persistent/public/default/node-np",
            params={"force": "false", "deleteSchema": "false"},
        )
        assert deleted.status_code == 204
        assert admin.get("/admin/v2/non-persistent/public/default").json() == []
