"""PRODUCER over Pulsar's binary protocol, for the front door (:mod:`.binary_door`): authorization, the topic,
the producer's access mode (:mod:`magnetar.broker.core.producer_access`) and its name.

Theory of operation: the door hands every PRODUCER here once it has checked that the connection may hold one
more handle. Shared, Exclusive and ExclusiveWithFencing producers are answered at once (PRODUCER_SUCCESS with
the topic epoch for the exclusive modes, or ERROR ``ProducerBusy`` / ``ProducerFenced`` / the core's
refusal). A WaitForExclusive producer that finds the topic taken is told so (PRODUCER_SUCCESS with
``producer_ready`` false) and waits in a task of its own on the connection's nursery, so the connection goes
on serving its other producers and consumers; the task ends with a second PRODUCER_SUCCESS (same request id,
ready) or an ERROR, and is cancelled by a CLOSE_PRODUCER for that id or by the connection's end (the
producer then leaves the line). A name already connected to the topic is ``ProducerBusy``, as Pulsar's.
A producer's schema goes to the topic's schema registry before the producer is created
(:mod:`.binary_schemas`); its version is answered in PRODUCER_SUCCESS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from magnetar.bookkeeper.runtime.auth.authentication import Principal
from magnetar.broker.core import (
    AccessMode,
    Capacity,
    Producer,
    ProducerBusyError,
    ProducerFencedError,
    ServiceError,
)
from magnetar.broker.protocols.pulsar_binary.commands import (
    CreateProducer,
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_close_producer,
    encode_error,
    encode_producer_success,
)
from magnetar.broker.protocols.pulsar_binary.errors import server_error_of
from magnetar.broker.protocols.pulsar_binary.schema_commands import decode_version
from magnetar.broker.sessions.binary_schemas import SchemaRefusal, producer_schema
from magnetar.broker.wire import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from magnetar.broker.sessions.host import SessionHost

EPOCH_MAX = 2**63 - 1
"""A topic epoch is a Java ``long``."""


@dataclass
class PendingProducer:
    """A WaitForExclusive producer waiting for its topic: ``leave`` takes it out of the line at once (set
    once it is in line), ``scope`` ends its task."""

    scope: trio.CancelScope
    leave: Callable[[], None] | None = None


@dataclass
class ProducerHandle:
    topic_name: TopicName
    producer: Producer
    topic: object
    schema_version: bytes | None = None
    """The producer's schema version (8 bytes), when it named a schema."""


class ProducerSide(Protocol):
    """What this module uses of the door's connection."""

    address: str
    principal: Principal | None
    producers: dict[int, ProducerHandle]
    pending_producers: dict[int, PendingProducer]
    nursery: trio.Nursery | None

    def send(self, command: bytes) -> None: ...


class ProducerRequests:
    """The PRODUCER commands of one front door (see the module docstring)."""

    def __init__(
        self,
        service: SessionHost,
        topic_of: Callable[[str], TopicName],
    ) -> None:
        self._service = service
        self._topic_of = topic_of

    def answered_again(self, conn: ProducerSide, command: CreateProducer) -> bool:
        """A PRODUCER for an id the connection already uses is answered here (True): the producer's
        PRODUCER_SUCCESS again, or ``ServiceNotReady`` while it waits for its topic (as Pulsar's)."""
        existing = conn.producers.get(command.producer_id)
        if existing is not None:
            producer = existing.producer
            epoch = producer.topic_epoch
            last = _last_sequence_id(producer)
            conn.send(
                encode_producer_success(
                    command.request_id,
                    producer.name,
                    last,
                    topic_epoch=epoch,
                    schema_version=existing.schema_version,
                )
            )
            return True
        if command.producer_id in conn.pending_producers:
            message = "Producer is already present on the connection"
            conn.send(encode_error(command.request_id, ServerError.ServiceNotReady, message))
            return True
        return False

    async def create(self, conn: ProducerSide, command: CreateProducer) -> None:
        try:
            access = AccessMode(command.access_mode)
        except ValueError:
            message = f"unknown producer access mode {command.access_mode}"
            conn.send(encode_error(command.request_id, ServerError.NotAllowedError, message))
            return
        if command.topic_epoch is not None and command.topic_epoch > EPOCH_MAX:
            message = f"topic_epoch {command.topic_epoch} is out of range"
            conn.send(encode_error(command.request_id, ServerError.NotAllowedError, message))
            return
        if access is not AccessMode.WAIT_FOR_EXCLUSIVE or conn.nursery is None:
            await self._create(conn, command, access)
            return
        pending = PendingProducer(trio.CancelScope())
        conn.pending_producers[command.producer_id] = pending

        async def wait() -> None:
            try:
                with pending.scope:
                    await self._create(conn, command, access, pending)
            finally:
                conn.pending_producers.pop(command.producer_id, None)

        conn.nursery.start_soon(wait)

    async def _create(
        self,
        conn: ProducerSide,
        command: CreateProducer,
        access: AccessMode,
        pending: PendingProducer | None = None,
    ) -> None:
        request_id = command.request_id
        service = self._service
        try:
            topic_name = self._topic_of(command.topic)
            assert conn.principal is not None
            await service.security.authorize_producer(conn.principal, topic_name)
            topic = await service.serve_topic(topic_name)
            schema_version = await producer_schema(service, topic_name, command.schema)
            name = command.producer_name or service.next_producer_name()
            capacity = Capacity(service.settings.producer_pending_messages_max)

            def make() -> Producer:
                return Producer(topic, name, capacity, partition=topic.partition, clock=topic.clock)

            def queued(leave: Callable[[], None]) -> None:
                if pending is not None:
                    pending.leave = leave
                conn.send(encode_producer_success(request_id, name, -1, ready=False))

            producer = await topic.wait_for_producer(
                name, make, access=access, topic_epoch=command.topic_epoch, queued=queued
            )
        except SchemaRefusal as exc:
            conn.send(encode_error(request_id, exc.error, exc.message))
            return
        except ProducerFencedError as exc:
            conn.send(encode_error(request_id, ServerError.ProducerFenced, str(exc)))
            return
        except ProducerBusyError as exc:
            conn.send(encode_error(request_id, ServerError.ProducerBusy, str(exc)))
            return
        except (InvalidTopicNameError, ServiceError) as exc:
            conn.send(encode_error(request_id, server_error_of(exc), str(exc)))
            return
        producer.address = conn.address
        producer.client_version = "pulsar-binary"
        if schema_version is not None:
            producer.schema_version = decode_version(schema_version)
        producer_id = command.producer_id

        def going_away(reason: str) -> None:
            handle = conn.producers.pop(producer_id, None)
            if handle is not None:
                conn.send(encode_close_producer(producer_id))

        producer.disconnect = going_away
        conn.producers[producer_id] = ProducerHandle(topic_name, producer, topic, schema_version)
        last = _last_sequence_id(producer)
        conn.send(
            encode_producer_success(
                request_id, name, last, topic_epoch=producer.topic_epoch, schema_version=schema_version
            )
        )

    @staticmethod
    def close_waiting(conn: ProducerSide, producer_id: int) -> None:
        """CLOSE_PRODUCER for a producer still waiting for its topic: it leaves the line."""
        waiting = conn.pending_producers.pop(producer_id, None)
        if waiting is not None:
            if waiting.leave is not None:
                waiting.leave()  # now: the topic's next turn must not go to it
            waiting.scope.cancel()


def _last_sequence_id(producer: Producer) -> int:
    """PRODUCER_SUCCESS's ``last_sequence_id``: the highest sequence id the topic accepted of this producer
    name when it deduplicates (the client numbers on from it), else -1."""
    dedup = producer.dedup
    return -1 if dedup is None else dedup.last_sequence_id(producer.name)
