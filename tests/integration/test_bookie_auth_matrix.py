"""The bookie port's auth matrix: each role x each bookie operation against a real ``magnetar bookie`` process
with token authentication on (``--auth-allowed-roles broker --super-user-roles admin``).

Roles: a superuser (``admin``), the brokers' role (``broker``), a tenant's application role (``app``: a valid
token of the cluster key, granted topics on the brokers), no token, and a bad token. Operations: AUTH itself,
ADD, READ, fencing READ, READ_LAC, the recovery read (fencing + high priority, as ledger recovery sends it)
and the recovery ADD - the last four that change a ledger both with the ledger's master key and with the
master key of the empty password (what a forger without the broker's password has).

Expected (``EXPECTED`` below):

=========== ============== ===================================== ================================
role        AUTH           ADD, READ, fencing READ, READ_LAC,    ADD, fencing READ, recovery read,
                           recovery read (ledger's master key)   recovery ADD (empty-password key)
=========== ============== ===================================== ================================
superuser   EOK            EOK                                   EUA
broker      EOK            EOK                                   EUA
app         EUA, closed    never reached                         never reached
no token    -              EUA                                   EUA
bad token   EUA, closed    never reached                         never reached
=========== ============== ===================================== ================================

Every (role, operation) cell runs on its own connection and its own ledger, which the broker role wrote
entry 0 of beforehand with the ledger's master key, so that no cell sees another's effects. Afterwards the
broker role checks that no refused cell changed anything: no entry added, no ledger fenced.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
from fixtures.auth import TokenKeys
from fixtures.bookie_server import packaged
from fixtures.processes import ProcessGroup

from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol
from magnetar.bookkeeper.protocol.digest import master_key
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
)
from magnetar.bookkeeper.protocol.status import BookieStatus

pytestmark = pytest.mark.processes

KEY = master_key(b"the broker's ledger password")
EMPTY_KEY = master_key(b"")
ROLES = ("superuser", "broker", "app", "no token", "bad token")
TOKEN_ROLE = {"superuser": "admin", "broker": "broker", "app": "app"}


def operation(name: str, ledger_id: int) -> Request:
    body = packaged(ledger_id, 1)
    return {
        "ADD": AddRequest(2, ledger_id, 1, KEY, body),
        "ADD, empty-password key": AddRequest(2, ledger_id, 1, EMPTY_KEY, body),
        "READ": ReadRequest(2, ledger_id, 0),
        "fencing READ": ReadRequest(2, ledger_id, -1, fence=True, master_key=KEY),
        "fencing READ, empty-password key": ReadRequest(2, ledger_id, -1, fence=True, master_key=EMPTY_KEY),
        "READ_LAC": ReadLacRequest(2, ledger_id),
        "recovery read": ReadRequest(2, ledger_id, 0, fence=True, high_priority=True, master_key=KEY),
        "recovery read, empty-password key": ReadRequest(
            2, ledger_id, 0, fence=True, high_priority=True, master_key=EMPTY_KEY
        ),
        "recovery ADD, empty-password key": AddRequest(2, ledger_id, 1, EMPTY_KEY, body, recovery=True),
    }[name]


OK, EUA = BookieStatus.EOK.name, BookieStatus.EUA.name


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


REFUSED = "AUTH EUA, closed"
"""The AUTH was answered EUA and the connection closed: the operation never reached the bookie."""
ADMITTED = {
    "AUTH": OK,
    "ADD": OK,
    "ADD, empty-password key": EUA,
    "READ": OK,
    "fencing READ": OK,
    "fencing READ, empty-password key": EUA,
    "READ_LAC": OK,
    "recovery read": OK,
    "recovery read, empty-password key": EUA,
    "recovery ADD, empty-password key": EUA,
}
EXPECTED: dict[str, dict[str, str]] = {
    "superuser": ADMITTED,
    "broker": ADMITTED,
    "app": dict.fromkeys(ADMITTED, REFUSED),
    "no token": {op: "-" if op == "AUTH" else EUA for op in ADMITTED},
    "bad token": dict.fromkeys(ADMITTED, REFUSED),
}
OPERATIONS = tuple(op for op in ADMITTED if op != "AUTH")


class Connection:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.proto = ClientProtocol()

    async def ask(self, request: Request | AuthRequest) -> object | None:
        """The answer to ``request``, or None when the bookie closes the connection instead."""
        await self.stream.send_all(self.proto.send(request))
        with trio.fail_after(10):
            while True:
                event = self.proto.next_event()
                if event is not NEED_DATA:
                    return event
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return None
                if not data:
                    return None
                self.proto.receive_data(data)

    async def closed_by_bookie(self) -> bool:
        with trio.fail_after(10):
            try:
                return await self.stream.receive_some(100) == b""
            except trio.BrokenResourceError:
                return True


def status_of(answer: object | None) -> str:
    assert isinstance(answer, AddResponse | ReadResponse | ReadLacResponse), f"no answer: {answer!r}"
    return answer.status.name


async def cell(port: int, token: str | None, op: str, ledger_id: int) -> str:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        connection = Connection(stream)
        if token is not None:
            auth = await connection.ask(AuthRequest(1, "token", token.encode()))
            assert isinstance(auth, AuthResponse)
            if auth.status is not BookieStatus.EOK:
                assert auth.status is BookieStatus.EUA
                assert await connection.closed_by_bookie()
                return REFUSED
        if op == "AUTH":
            return OK if token is not None else "-"
        return status_of(await connection.ask(operation(op, ledger_id)))


async def matrix(port: int, tokens: dict[str, str | None]) -> dict[str, dict[str, str]]:
    broker = tokens["broker"]
    ledgers = {(role, op): 1000 + i for i, (role, op) in enumerate((r, o) for r in ROLES for o in OPERATIONS)}
    for ledger_id in ledgers.values():  # entry 0 of every cell's ledger, written by the brokers' role
        assert await cell_add(port, broker, ledger_id, 0) == OK
    seen: dict[str, dict[str, str]] = {}
    for role in ROLES:
        seen[role] = {"AUTH": await cell(port, tokens[role], "AUTH", 0)}
        for op in OPERATIONS:
            seen[role][op] = await cell(port, tokens[role], op, ledgers[role, op])
    # Nothing a refused cell sent changed its ledger: entry 1 is absent and the ledger is not fenced (a normal
    # add by the brokers' role is accepted). The admitted cells that added or fenced show it.
    for (role, op), ledger_id in ledgers.items():
        admitted = seen[role][op] == OK
        if admitted and op == "ADD":
            assert await cell_read(port, broker, ledger_id, 1) == OK
            continue
        assert await cell_read(port, broker, ledger_id, 1) == "ENOENTRY", (role, op)
        fenced = admitted and op in ("fencing READ", "recovery read")
        assert await cell_add(port, broker, ledger_id, 1) == ("EFENCED" if fenced else OK), (role, op)
    return seen


async def cell_add(port: int, token: str | None, ledger_id: int, entry_id: int) -> str:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        connection = Connection(stream)
        assert token is not None
        auth = await connection.ask(AuthRequest(1, "token", token.encode()))
        assert isinstance(auth, AuthResponse)
        return status_of(
            await connection.ask(AddRequest(2, ledger_id, entry_id, KEY, packaged(ledger_id, entry_id)))
        )


async def cell_read(port: int, token: str | None, ledger_id: int, entry_id: int) -> str:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        connection = Connection(stream)
        assert token is not None
        await connection.ask(AuthRequest(1, "token", token.encode()))
        return status_of(await connection.ask(ReadRequest(2, ledger_id, entry_id)))


def test_each_role_against_each_bookie_operation(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(token_keys.secret)
    bookie = magnetar_processes.bookie(
        "matrix-bookie",
        "memory://",
        tmp_path / "data",
        "--storage", "memory",
        "--authentication-enabled", "--token-secret-key", key_file.as_uri(),
        "--auth-allowed-roles", "broker", "--super-user-roles", "admin",
    )  # fmt: skip
    tokens: dict[str, str | None] = {role: token_keys.token(name) for role, name in TOKEN_ROLE.items()}
    tokens["no token"] = None
    tokens["bad token"] = token_keys.token("broker")[:-4] + "AAAA"  # the brokers' role, a forged signature
    seen = trio.run(matrix, int(bookie.ready["port"]), tokens)
    assert seen == EXPECTED
    assert bookie.stop() == 0
    log = bookie.log_tail(200)
    assert "roles admitted: admin, broker" in log
    assert "role 'app' may not connect" in log


async def fence_unknown(port: int, tokens: dict[str, str | None], ledger_id: int) -> dict[str, str]:
    """What a fencing read of a ledger id the bookie has never seen does, and what follows from it."""
    return {
        "app: fencing READ": await cell(port, tokens["app"], "fencing READ", ledger_id),
        "broker: fencing READ, unknown ledger": await cell(port, tokens["broker"], "fencing READ", ledger_id),
        "broker: ADD": await cell(port, tokens["broker"], "ADD", ledger_id),
        "broker: ADD, empty-password key": await cell(
            port, tokens["broker"], "ADD, empty-password key", ledger_id
        ),
        "broker: fencing READ, empty-password key": await cell(
            port, tokens["broker"], "fencing READ, empty-password key", ledger_id
        ),
        "broker: READ": await cell(port, tokens["broker"], "READ", ledger_id),
    }


def test_a_fencing_read_of_an_unknown_ledger_creates_it_fenced_as_bookkeeper_does(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    """BookKeeper's bookie records an unknown ledger on a fencing read (with the request's master key),
    fences it durably and answers the read (no entry); so does Magnetar's. Only the roles the bookie admits
    can do it, the ledger then refuses adds (EFENCED) and any other master key (EUA), across a restart;
    garbage collection removes it later, as the metadata store does not list it."""
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(token_keys.secret)
    args = (
        "--storage", "disk", "--port", str(free_port()),
        "--authentication-enabled", "--token-secret-key", key_file.as_uri(),
        "--auth-allowed-roles", "broker", "--super-user-roles", "admin",
    )  # fmt: skip
    tokens: dict[str, str | None] = {role: token_keys.token(name) for role, name in TOKEN_ROLE.items()}
    after_fence = {
        "broker: ADD": "EFENCED",
        "broker: ADD, empty-password key": EUA,
        "broker: fencing READ, empty-password key": EUA,
        "broker: READ": "ENOENTRY",
    }
    bookie = magnetar_processes.bookie("fence-bookie", zookeeper_url, tmp_path / "data", *args)
    seen = trio.run(fence_unknown, int(bookie.ready["port"]), tokens, 777_000_001)
    assert seen == {
        "app: fencing READ": REFUSED,
        "broker: fencing READ, unknown ledger": "ENOENTRY",
        **after_fence,
    }
    assert bookie.stop() == 0
    again = magnetar_processes.bookie("fence-bookie-restarted", zookeeper_url, tmp_path / "data", *args)
    seen = trio.run(fence_unknown, int(again.ready["port"]), tokens, 777_000_001)
    assert {op: seen[op] for op in after_fence} == after_fence  # the fence and the key were durable
    assert again.stop() == 0
