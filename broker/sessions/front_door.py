"""The session front door: Pulsar's WebSocket endpoints (producer, consumer, reader), whatever protocol the
client speaks on them.

This module owns what is the same for every protocol; the protocol adapter (:mod:`magnetar.broker.protocols`,
chosen by the client's subprotocol from :mod:`.registry`) encodes the session's outbound frames and handles
the frames the client sends (:mod:`magnetar.broker.protocols.adapter` says what each side does).

Each upgrade request is checked before it is accepted, as Pulsar's handlers create their producer/consumer
before the upgrade completes: a bad path or query parameter is answered 400 ``Invalid query params: ...``, a
missing namespace or topic 404, a busy producer name or exclusive subscription 409, a terminated topic 503
(the HTTP status of each refusal's kind: :mod:`magnetar.broker.protocols.http_status`), and a topic another
broker owns is served through this broker's owner proxy (:mod:`magnetar.broker.owner_proxy`: the session is
relayed to the owner and follows the topic when it moves; a partitioned topic with any partition owned
elsewhere through one upstream session per partition) - or, with ``ws_proxy_enabled=false`` or for a session
that is itself proxied, answered **307** with ``Location: ws://<owner>/<same path and query>``
(``websocket-client`` and ``websockets`` follow it). Once accepted, the session runs its tasks: the reader
loop below (every frame of a received chunk handed to the adapter: a group at a time while the adapter's
handler takes groups - a consumer's acks, :class:`~magnetar.broker.protocols.adapter.FrameGroups` - the
others one at a time), the session's frame sender
(:class:`~magnetar.broker.protocols.outbound.OutboundFrames`) and, for a consumer, its redelivery timers
(:class:`~magnetar.broker.core.redelivery_timers.RedeliveryTimers`). A frame the adapter cannot accept closes
the session with its :class:`~magnetar.broker.protocols.ws_errors.WsSessionError`. When the topic is unloaded
or its bundle lost, sessions are closed with 1001 (going away) so clients look the topic up again; what is
queued for the client goes out first (bounded by ``ws_close_flush_timeout_ms``).

Security (:mod:`magnetar.broker.security.broker_security`): right after the path is parsed, the upgrade is
authenticated (``Authorization: Bearer`` or the ``token`` query parameter; 401 ``Failed to authenticate:
...``) and authorized (produce for a producer, consume on the subscription for a consumer, consume for a
reader; 403 ``Not authorized: ...``), before any topic is looked up or created - Pulsar's ``checkAuth``. A
producer's messages beyond the publish rate limits get ``send-error:8`` with the limit named, and the session
goes on.

Bounds (:mod:`magnetar.broker.core.consumer` and :mod:`magnetar.broker.protocols.outbound` have the details):
a session's outbound queue holds at most
``ws_send_queue_messages_max`` messages and ``ws_send_queue_bytes_max`` bytes. Deliveries stop at that
bound, and a request answered into a full queue - for a producer, any request, its acknowledgements arrive
whenever their adds complete - makes the session read no further request until the client has read: TCP
carries the back-pressure to a client that sends without reading.

Magnetar extensions: a client offering the ``magnetar.v1`` WebSocket subprotocol gets the binary protocol of
:mod:`magnetar.broker.wire.magnetar_v1` on the same endpoints (:mod:`magnetar.broker.protocols.magnetar_v1`);
the consumer
accepts ``subscriptionInitialPosition=Earliest|Latest`` (default Latest, the
Java client's default) for a subscription it creates.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.runtime.http import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    WebSocket,
    WebSocketClosed,
    WebSocketRequest,
    error_response,
)
from magnetar.broker.core import (
    AccessError,
    Capacity,
    Consumer,
    FlowControl,
    NonPersistentTopic,
    NotOwnerError,
    PartitionRouter,
    PersistentTopic,
    Producer,
    RedeliveryTimers,
    ServiceError,
    Subscriber,
    SubscriptionType,
)
from magnetar.broker.owner_proxy.proxy import OwnerProxy
from magnetar.broker.policies import ADMISSION_HOLD, ADMISSION_OK, ADMISSION_REJECT
from magnetar.broker.protocols.adapter import (
    ConsumerSession,
    FrameGroups,
    FrameHandler,
    FramesHandler,
    ProducerSession,
    PublishesUnrestricted,
    PublishRefusal,
)
from magnetar.broker.protocols.http_status import http_status
from magnetar.broker.protocols.outbound import OutboundFrames
from magnetar.broker.protocols.params import (
    ALL_PATH_FORMS,
    ConsumerParams,
    ProducerParams,
    ReaderParams,
    WsKind,
    parse_ws_path,
)
from magnetar.broker.protocols.ws_errors import UpgradeFailure, WsSessionError, WsUpgradeError
from magnetar.broker.sessions.registry import adapter_for
from magnetar.broker.wire import EARLIEST, LATEST, TopicName

if TYPE_CHECKING:
    from magnetar.broker.security import PublishLimiter
    from magnetar.broker.sessions.host import SessionHost, SessionSettings

log = logging.getLogger(__name__)

INITIAL_POSITIONS = ("Latest", "Earliest")

ServedTopic = PersistentTopic | NonPersistentTopic
"""Either kind of topic: the handlers use only what both offer (see :mod:`magnetar.broker.core`)."""


class _Session:
    """What one accepted WebSocket session owns: its protocol adapter, its outbound frames and the means to
    end it."""

    def __init__(self, request: WebSocketRequest, settings: SessionSettings) -> None:
        self.adapter = adapter_for(request.subprotocols)
        self.frames: OutboundFrames = self.adapter.outbound(
            bytes_max=settings.http.ws_send_queue_bytes_max,
            messages_max=settings.http.ws_send_queue_messages_max,
        )
        self.scope = trio.CancelScope()
        self.kicked: tuple[int, str] | None = None

    def kick(self, code: int, reason: str) -> None:
        if self.kicked is None:
            self.kicked = (code, reason)
        self.scope.cancel()

    def going_away(self, reason: str) -> None:
        """The topic went away (unloaded, terminated, lost): 1001, so the client looks it up again."""
        self.kick(CLOSE_GOING_AWAY, reason)

    async def accept(self, request: WebSocketRequest) -> WebSocket:
        return await request.accept(self.adapter.subprotocol)


def _with_deliveries(on_frame: FrameHandler, frames: OutboundFrames) -> FramesHandler:
    """A consumer's or reader's frames of one read: a group at a time while the handler takes groups (a
    consumer's acks, :class:`~magnetar.broker.protocols.adapter.FrameGroups`: they answer nothing), the others
    one by one. Deliveries fill its outbound queue, and requests that answer nothing (acks, permits) go on;
    one whose answer went into a full queue waits for the client to read before the next frame is handled (a
    producer's handler does that after every answer)."""
    take_group = on_frame.take_group if isinstance(on_frame, FrameGroups) else None

    async def on_frames(batch: Sequence[str | bytes]) -> None:
        index = 0
        count = len(batch)
        while index < count:
            if take_group is not None:
                index = take_group(batch, index)
                if index >= count:
                    break
            message = batch[index]
            index += 1
            queued = frames.messages
            await on_frame(message)
            if frames.messages > queued and frames.full:
                await frames.wait_for_room()

    return on_frames


class SessionFrontDoor:
    """The WebSocket endpoints' handlers (:func:`magnetar.broker.http_app.build_router` routes them)."""

    def __init__(self, service: SessionHost) -> None:
        self._service = service
        self._proxy = OwnerProxy(service)
        self.proxy_metrics = self._proxy.metrics
        """The owner proxy's ``/metrics`` families, for the broker's HTTP application to add."""

    # -- shared -----------------------------------------------------------------------------------

    async def _proxied(
        self, request: WebSocketRequest, session: _Session, kind: WsKind, exc: Exception
    ) -> bool:
        """Serve a session refused with :class:`NotOwnerError` through the owner proxy
        (:mod:`magnetar.broker.owner_proxy`); False if it is not for the proxy: another error, the
        proxy off, or a session that is itself proxied. A partitioned topic of which some partition is not
        served here is served through one upstream session per partition (every partition, this broker's own
        through a loopback session: :mod:`magnetar.broker.owner_proxy.fanout`)."""
        if not isinstance(exc, NotOwnerError) or not self._proxy.proxies(request):
            return False
        topic = parse_ws_path(request.path).topic
        try:
            partitions = await self._service.partitions(topic)
        except ServiceError:
            return False
        if partitions > 0:
            await self._proxy.serve_partitioned(request, kind, session.adapter, topic, partitions)
        else:
            await self._proxy.serve(request, kind, session.adapter, topic, exc.http_url, exc.http_url_tls)
        return True

    async def _refuse(self, request: WebSocketRequest, exc: Exception) -> None:
        if isinstance(exc, NotOwnerError):
            if request.head.tls and exc.http_url_tls:
                location = "wss://" + exc.http_url_tls.split("://", 1)[-1] + request.head.target
            else:
                location = "ws://" + exc.http_url.split("://", 1)[-1] + request.head.target
            response = error_response(http_status(exc), str(exc), (("location", location),))
        elif isinstance(exc, WsUpgradeError):
            response = error_response(exc.status, exc.reason)
        elif isinstance(exc, AccessError):  # the security's answer is whole: its status and its words
            response = error_response(http_status(exc), str(exc))
        elif isinstance(exc, ServiceError):
            response = error_response(http_status(exc), f"Failed to create producer/consumer: {exc}")
        else:
            raise exc
        await request.reject(response)

    async def _serve(
        self,
        ws: WebSocket,
        session: _Session,
        on_frames: FramesHandler,
        extra: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        close = (CLOSE_NORMAL, "")
        frames = session.frames
        frames_sent = trio.Event()

        async def send_frames() -> None:
            try:
                await frames.run(ws)
            finally:
                frames_sent.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_frames)
            if extra is not None:
                nursery.start_soon(extra)
            with session.scope:
                try:
                    while True:
                        # Every message of a received chunk at once: one task switch per chunk.
                        await on_frames(await ws.receive_batch())
                except WebSocketClosed:
                    pass
                except WsSessionError as exc:
                    close = (exc.close_code, exc.reason)
            if session.kicked is not None:
                close = session.kicked
                # The broker ends the session: what is queued for the client goes out before the Close.
                # When a topic closes, the receipts of the messages it stored while closing are among it
                # (bounded in time: a client may not be reading).
                frames.finish()
                with trio.move_on_after(self._service.settings.ws_close_flush_timeout_ms / 1000):
                    await frames_sent.wait()
            nursery.cancel_scope.cancel()
        session.frames.close()
        if not ws.closed:
            await ws.close(*close)

    @staticmethod
    def _address(request: WebSocketRequest) -> str:
        client = request.client
        return f"{client[0]}:{client[1]}" if client else ""

    async def _topics(self, topic: TopicName) -> list[TopicName]:
        partitions = await self._service.partitions(topic)
        return [topic] if partitions == 0 else [topic.partition(i) for i in range(partitions)]

    # -- producer -------------------------------------------------------------------------------

    async def producer(self, request: WebSocketRequest) -> None:
        session = _Session(request, self._service.settings)
        producers: list[tuple[ServedTopic, Producer]] = []
        try:
            target = parse_ws_path(request.path)
            if target.kind is not WsKind.PRODUCER:
                raise WsUpgradeError.invalid("not a producer path")
            security = self._service.security
            principal = security.authenticate_upgrade(request.head)
            await security.authorize_producer(principal, target.topic)
            limiter = security.publish_limiter(principal, request.head)
            params = ProducerParams.parse(request.query)
            limit = min(
                params.max_pending_messages or 1, self._service.settings.producer_pending_messages_max
            )
            capacity = Capacity(limit)
            name = params.producer_name or self._service.next_producer_name()
            for topic_name in await self._topics(target.topic):
                topic = await self._service.serve_topic(topic_name)

                def make(topic: ServedTopic = topic) -> Producer:
                    return Producer(
                        topic,
                        name,
                        capacity,
                        partition=topic.partition,
                        clock=topic.clock,
                        initial_sequence_id=params.initial_sequence_id,
                    )

                producer = topic.add_producer(name, make)
                producer.disconnect = session.going_away
                producer.address = self._address(request)
                producer.client_version = "websocket"
                producers.append((topic, producer))
            if self._quota_verdict(producers) == ADMISSION_REJECT:
                raise WsUpgradeError.of(
                    UpgradeFailure.QUOTA_EXCEEDED_OR_TERMINATED,
                    f"Cannot create producer on topic with backlog quota exceeded: {target.topic}",
                )
        except (WsUpgradeError, ServiceError) as exc:
            self._remove_producers(producers)
            if not await self._proxied(request, session, WsKind.PRODUCER, exc):
                await self._refuse(request, exc)
            return
        publisher: Producer | PartitionRouter[Producer] = producers[0][1]
        if target.topic != producers[0][0].name:
            publisher = PartitionRouter(
                [producer for _, producer in producers],
                routing_mode=params.message_routing_mode,
                hashing_scheme=params.hashing_scheme,
                rng=self._service.rng,
            )
        try:
            ws = await session.accept(request)
            settings = self._service.settings
            handler = session.adapter.producer(
                ProducerSession(
                    frames=session.frames,
                    publisher=publisher,
                    capacity=capacity,
                    refusal=self._publish_refusal(target.topic, limiter, producers),
                    unrestricted=self._publishes_unrestricted(limiter, producers),
                    batch_messages_max=settings.publish_batch_messages_max,
                    batch_bytes_max=settings.publish_batch_bytes_max,
                )
            )
            await self._serve(ws, session, handler)
        finally:
            self._remove_producers(producers)

    def _publishes_unrestricted(
        self, limiter: PublishLimiter, producers: list[tuple[ServedTopic, Producer]]
    ) -> PublishesUnrestricted:
        """Whether the session's publishes may skip the refusal now: no publish rate limit applies to it and
        no backlog quota is exceeded anywhere (then :meth:`_publish_refusal` answers None at once)."""
        if not limiter.unlimited:
            return lambda: False

        def unrestricted() -> bool:
            gate = self._service.publish_gate
            return gate is None or not gate.any_exceeded

        return unrestricted

    def _publish_refusal(
        self, topic: TopicName, limiter: PublishLimiter, producers: list[tuple[ServedTopic, Producer]]
    ) -> PublishRefusal:
        """Why N messages may not be published now (publish rate limits, then backlog quotas, which wait
        while held), or None: the same rules for JSON publishes and binary SEND frames."""

        async def refusal(messages: int) -> str | None:
            refused = limiter.try_publish(messages)
            if refused is not None:
                return refused
            if await self._admitted(producers):
                return None
            return f"ProducerBlockedQuotaExceededException: backlog quota exceeded on {topic}"

        return refusal

    def _quota_verdict(self, producers: list[tuple[ServedTopic, Producer]]) -> str:
        gate = self._service.publish_gate
        if gate is None or not gate.any_exceeded:
            return ADMISSION_OK
        verdicts = {gate.admission(t.ml.name) for t, _ in producers if isinstance(t, PersistentTopic)}
        for verdict in (ADMISSION_REJECT, ADMISSION_HOLD):
            if verdict in verdicts:
                return verdict
        return ADMISSION_OK

    async def _admitted(self, producers: list[tuple[ServedTopic, Producer]]) -> bool:
        """Backlog quotas: False to reject the publish; waits while the topic is held."""
        while (verdict := self._quota_verdict(producers)) != ADMISSION_OK:
            if verdict == ADMISSION_REJECT:
                return False
            gate = self._service.publish_gate
            assert gate is not None
            for topic, _ in producers:
                if isinstance(topic, PersistentTopic):  # a non-persistent topic has no backlog
                    await gate.wait_until_within_quota(topic.ml.name)
        return True

    @staticmethod
    def _remove_producers(producers: list[tuple[ServedTopic, Producer]]) -> None:
        for topic, producer in producers:
            topic.remove_producer(producer)

    # -- consumer -------------------------------------------------------------------------------

    async def consumer(self, request: WebSocketRequest) -> None:
        session = _Session(request, self._service.settings)
        consumers: list[Subscriber] = []
        try:
            target = parse_ws_path(request.path)
            if target.kind is not WsKind.CONSUMER or target.subscription is None:
                raise WsUpgradeError.invalid("not a consumer path")
            security = self._service.security
            principal = security.authenticate_upgrade(request.head)
            await security.authorize_consumer(principal, target.topic, target.subscription)
            params = ConsumerParams.parse(request.query, target.topic, target.subscription)
            initial = request.query.get("subscriptionInitialPosition", "Latest")
            if initial not in INITIAL_POSITIONS:
                raise WsUpgradeError.invalid(f"Invalid subscriptionInitialPosition {initial}")
            flow = FlowControl(params.max_pending_messages, pull_mode=params.pull_mode)
            settings = self._service.settings
            consumer_name = params.consumer_name or _random_name(self._service)
            sub_type = SubscriptionType(params.subscription_type)
            for topic_name in await self._topics(target.topic):
                topic = await self._service.serve_topic(topic_name)

                def make(topic: ServedTopic = topic) -> Consumer:
                    consumer = Consumer(
                        name=consumer_name,
                        priority_level=params.priority_level,
                        partition=topic.partition,
                        flow=flow,
                        sink=session.frames,
                        ack_timeout_ms=params.ack_timeout_ms,
                        nack_delay_ms=params.negative_ack_redelivery_delay_ms,
                        unacked_messages_max=settings.consumer_unacked_messages_max,
                        unacked_bytes_max=settings.consumer_unacked_bytes_max,
                    )
                    consumer.disconnect = session.going_away
                    consumer.address = self._address(request)
                    consumer.connected_since_ms = topic.now_ms()
                    return consumer

                consumers.append(
                    await topic.subscribe(
                        target.subscription,
                        make,
                        sub_type,
                        durable=params.subscription_mode == "Durable",
                        start_earliest=initial == "Earliest",
                    )
                )
        except (WsUpgradeError, ServiceError) as exc:
            self._remove_consumers(consumers)
            if not await self._proxied(request, session, WsKind.CONSUMER, exc):
                await self._refuse(request, exc)
            return
        try:
            ws = await session.accept(request)
            timers = RedeliveryTimers(consumers, self._service.settings.consumer_ack_timeout_tick_ms)
            handler = session.adapter.consumer(ConsumerSession(session.frames, consumers, flow, session.kick))
            await self._serve(ws, session, _with_deliveries(handler, session.frames), timers.run)
        finally:
            self._remove_consumers(consumers)

    @staticmethod
    def _remove_consumers(consumers: list[Subscriber]) -> None:
        for subscriber in consumers:
            subscriber.close()

    # -- reader ---------------------------------------------------------------------------------

    async def reader(self, request: WebSocketRequest) -> None:
        session = _Session(request, self._service.settings)
        consumers: list[Subscriber] = []
        try:
            target = parse_ws_path(request.path)
            if target.kind is not WsKind.READER:
                raise WsUpgradeError.invalid("not a reader path")
            security = self._service.security
            principal = security.authenticate_upgrade(request.head)
            await security.authorize_reader(principal, target.topic)
            params = ReaderParams.parse(request.query)
            flow = FlowControl(params.max_pending_messages, pull_mode=False)
            reader_name = params.reader_name or _random_name(self._service)
            topics = await self._topics(target.topic)
            start = params.start_message_id
            if len(topics) > 1 and start not in (EARLIEST, LATEST):
                raise WsUpgradeError.invalid("a reader of a partitioned topic starts at earliest or latest")
            for topic_name in topics:
                topic = await self._service.serve_topic(topic_name)

                def make(topic: ServedTopic = topic) -> Consumer:
                    consumer = Consumer(
                        name=reader_name,
                        priority_level=0,
                        partition=topic.partition,
                        flow=flow,
                        sink=session.frames,
                        track_pending=False,
                    )
                    consumer.disconnect = session.going_away
                    consumer.address = self._address(request)
                    return consumer

                consumers.append(topic.create_reader(start, make))
        except (WsUpgradeError, ServiceError) as exc:
            self._remove_consumers(consumers)
            if not await self._proxied(request, session, WsKind.READER, exc):
                await self._refuse(request, exc)
            return
        try:
            ws = await session.accept(request)
            handler = session.adapter.reader(ConsumerSession(session.frames, consumers, flow, session.kick))
            await self._serve(ws, session, _with_deliveries(handler, session.frames))
        finally:
            self._remove_consumers(consumers)

    # -- anything else under /ws ------------------------------------------------------------

    async def invalid(self, request: WebSocketRequest) -> None:
        """A ``/ws/...`` path that is none of the three endpoints: 400, as Pulsar's path checks."""
        try:
            parse_ws_path(request.path)
            raise WsUpgradeError.invalid_path(f"not a WebSocket endpoint: the paths are {ALL_PATH_FORMS}")
        except WsUpgradeError as exc:
            await self._refuse(request, exc)


def _random_name(service: SessionHost) -> str:
    """Pulsar's clients name unnamed consumers with 5 random characters."""
    return "".join(service.rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5))
