"""Settings of a broker process: one pydantic-settings model, every field also ``MAGNETAR_<NAME>``.

Names carry their unit last and map to Pulsar's ``broker.conf`` where one exists:
``allow_auto_topic_creation`` = ``allowAutoTopicCreation``, ``default_number_of_namespace_bundles`` =
``defaultNumberOfNamespaceBundles``, ``ensemble_size`` / ``write_quorum`` / ``ack_quorum`` =
``managedLedgerDefault{EnsembleSize,WriteQuorum,AckQuorum}``, ``ws_frame_bytes_max`` = Pulsar's
``maxMessageSize`` (5 MiB; a WebSocket message carries one JSON publish request),
``ws_idle_timeout_ms`` = ``webSocketSessionIdleTimeoutMillis``,
``metadata_session_timeout_ms`` = ``metadataStoreSessionTimeoutMillis``.

Settings shared with other process kinds or layers are declared once, in their own models, and inherited
(so each keeps its flat name as a flag, a ``MAGNETAR_<NAME>`` variable and a config key): security
(:class:`~.security_settings.SecuritySettings`: authentication, authorization, TLS, protective limits; all
off by default), the metadata store and the way to it (:class:`ProcessMetadataSettings`, as the bookies'),
where it listens (``bind_address``, ``http_port``: :class:`HttpListenSettings`, as the standalone's) and the
host it is known by (``advertised_address``: :class:`AdvertisedAddressSettings`, as a bookie's), retention,
expiry and backlog quotas (:class:`RetentionSettings`, which the retention service takes), a namespace's
defaults (bundles, retention, TTL, topic policies: :class:`NamespaceDefaultsSettings`, which the admin API's
settings inherit), the load manager's (Pulsar's ``loadBalancer*``:
:class:`~.load_balancer_settings.LoadBalancerSettings`), the WebSocket owner proxy's (``ws_proxy_*``,
``broker_client_*``: :class:`~.proxy_settings.ProxySettings`) and the default quorum of new ledgers
(:class:`QuorumSettings`).

The layers below are composed whole (``FLATTENED``): the HTTP server's limits are ``http``
(:class:`HttpLimits`), the managed ledger's ``managed_ledger`` (:class:`ManagedLedgerOptions`), the
replication client's ``client`` (:class:`ClientOptions`). Each of their settings is declared once, in its
layer, and reached by its flat name as before (``ws_frame_bytes_max``, ``MAGNETAR_MAX_ENTRIES_PER_LEDGER``,
``add_timeout_ms = 5000``) or in its table (``[client]``, ``MAGNETAR_CLIENT__ADD_TIMEOUT_MS``); see
:mod:`magnetar.bookkeeper.runtime.flat_settings`. The ``*_settings()`` methods complete each layer's model
with what the broker sets itself (its address and port, the quorum, the ledgers' password and digest).
"""

from __future__ import annotations

import dataclasses
import random
import ssl
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from magnetar.bookkeeper.client import ClientOptions, ClientSettings, QuorumSettings
from magnetar.bookkeeper.metadata import ProcessMetadataSettings
from magnetar.bookkeeper.protocol import FRAME_BYTES_MAX_DEFAULT, SizeLimit, check_size_chain
from magnetar.bookkeeper.runtime import AdvertisedAddressSettings, advertised_host_for, nest_flat
from magnetar.bookkeeper.runtime.auth.tls import server_ssl_context
from magnetar.bookkeeper.runtime.http import HttpLimits, HttpListenSettings, HttpSettings
from magnetar.broker.owner_proxy.settings import ProxySettings
from magnetar.broker.ownership import BUNDLES_MAX, LoadBalancerSettings
from magnetar.broker.policies import BrokerPolicyDefaults
from magnetar.broker.protocols.pulsar_binary.framing import (
    CHUNKED_MESSAGE_BYTES_MAX_DEFAULT,
    MAX_MESSAGE_SIZE_DEFAULT,
)
from magnetar.broker.schemas import SchemaSettings
from magnetar.broker.security import SecuritySettings
from magnetar.broker.topic_policy_settings import TopicPolicyDefaults
from magnetar.broker.wire import (
    ADVERTISED_LISTENERS_CHARS_MAX,
    AdvertisedListener,
    parse_advertised_listeners,
    shown_name,
)
from magnetar.managed_ledger.retention_settings import RetentionDefaults, RetentionSettings
from magnetar.managed_ledger.settings import ManagedLedgerOptions, ManagedLedgerSettings

PositiveInt = Annotated[int, Field(gt=0)]
MIB = 1024 * 1024


LEDGER_PASSWORD_BYTES = 20
"""Length of a drawn ledger password: as many bytes as the master key derived from it (SHA-1)."""


class NamespaceDefaultsSettings(RetentionDefaults, TopicPolicyDefaults):
    """What a namespace gets when its policies do not say (Pulsar's broker defaults), declared once: the
    broker's settings and the admin API's (:class:`magnetar.admin.rest.AdminSettings`) inherit them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_number_of_namespace_bundles: Annotated[int, Field(ge=1, le=BUNDLES_MAX)] = 4
    """Bundles of a namespace whose policies name none (Pulsar's default is 4)."""
    topic_level_policies_enabled: bool = True
    """Pulsar's ``topicLevelPoliciesEnabled``: the admin API's topic-level policy routes answer (405 when
    off)."""


class BrokerServicePortSettings(BaseModel):
    """The port of Pulsar's binary protocol, declared once: a broker's and ``magnetar standalone``'s
    inherit it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    broker_service_port: int = Field(default=6650, ge=0, le=65535)
    """TCP port of Pulsar's binary protocol (Pulsar's ``brokerServicePort``: the official clients'
    ``pulsar://host:port``), on ``bind_address``; 0 picks a free one (reported in the ready line)."""
    broker_service_port_tls: int | None = Field(default=None, ge=0, le=65535)
    """TCP port of Pulsar's binary protocol over TLS (Pulsar's ``brokerServicePortTls``: ``pulsar+ssl://``),
    on ``bind_address``, with the certificate files of the HTTPS port (``tls_certificate_file``,
    ``tls_key_file``, ``tls_trust_certs_file``); unset: off; 0 picks a free one (reported in the ready
    line)."""


class BrokerSettings(
    BrokerServicePortSettings,
    SecuritySettings,
    ProcessMetadataSettings,
    RetentionSettings,
    NamespaceDefaultsSettings,
    LoadBalancerSettings,
    ProxySettings,
    QuorumSettings,
    HttpListenSettings,
    AdvertisedAddressSettings,
    SchemaSettings,
):
    model_config = SettingsConfigDict(
        env_prefix="MAGNETAR_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )
    FLATTENED: ClassVar[tuple[str, ...]] = ("http", "managed_ledger", "client")
    """Composed layers whose settings are also reached by their flat names (:mod:`.flat_settings`)."""

    # -- identity and addresses (metadata_url: ProcessMetadataSettings'; bind_address, http_port:
    # HttpListenSettings') --------------------------------------------------------------------------------
    cluster: str = "standalone"
    # advertised_address (the host clients are told to use in lookups and redirects):
    # AdvertisedAddressSettings'
    cluster_metadata_init: bool = True
    """Create the cluster (with this broker's HTTP URL as its ``serviceUrl``), tenant ``public`` and namespace
    ``public/default`` at start when they are missing, as Pulsar's standalone does. Off where one place
    initializes the cluster: the Helm chart's init job (``magnetar initialize-cluster-metadata``) writes the
    cluster's service URLs and bundle count, and its brokers only wait for them."""

    # -- topics -----------------------------------------------------------------------------------
    # allow_auto_topic_creation and the other defaults of topic policies: TopicPolicyDefaults'
    non_persistent_topics_max: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    """Non-persistent topics this broker holds in memory at once; creating one more is refused (412 on the
    WebSocket upgrade). ``topics_per_namespace_max`` also applies, counting a namespace's loaded
    non-persistent topics."""
    # default_number_of_namespace_bundles: NamespaceDefaultsSettings'

    # -- storage (managed ledger + replication client) ------------------------------------------
    # The default quorum of new ledgers (ensemble_size, write_quorum, ack_quorum) is QuorumSettings'.
    managed_ledger: ManagedLedgerOptions = Field(default_factory=ManagedLedgerOptions)
    """The managed ledger's settings (:class:`ManagedLedgerOptions`: ``max_entries_per_ledger``,
    ``entry_cache_bytes_max``, rollover ...), each also reached by its flat name."""
    client: ClientOptions = Field(default_factory=ClientOptions)
    """The replication client's settings (:class:`ClientOptions`: ``add_timeout_ms``, ``read_timeout_ms``,
    rack-aware placement ...), each also reached by its flat name."""

    # -- metadata outages (see broker/metadata_outage.py and docs/metadata-outages.md) -------------
    serve_without_session_max_s: Annotated[float, Field(ge=0, le=86_400)] = 300
    """How long the broker keeps serving its bundles without a confirmed metadata session, counted from the
    loss of its connection to the store until every bundle's ownership node exists again; then it gives
    them up (0: give every bundle up the moment the session is lost)."""
    ownership_claim_retry_interval_ms: Annotated[int, Field(ge=10, le=600_000)] = 1_000
    """Pause between attempts to create a bundle's ownership node again after a lost session."""
    metadata_wait_timeout_ms: Annotated[int, Field(ge=0, le=600_000)] = 10_000
    """How long a request that needs the metadata store (loading a topic, creating a subscription,
    acquiring a bundle) waits for it during an outage before failing with 503."""
    metadata_waiters_max: Annotated[int, Field(ge=0, le=1_000_000)] = 1_000
    """Requests that may wait for the metadata store at once; more fail with 503 at once."""
    policies_last_known_max: Annotated[int, Field(ge=0, le=1_000_000)] = 10_000
    """Policy documents (namespaces, tenants, topics) remembered to answer reads during an outage."""

    # -- stats and policies (retention, expiry and backlog quotas are RetentionSettings) ---------------
    stats_update_interval_s: Annotated[float, Field(gt=0)] = 60
    """statsUpdateFrequencyInSecs: topic stats' rates (``msgRateIn`` ...) are averages over this period,
    recomputed at its end."""
    # topic_level_policies_enabled: NamespaceDefaultsSettings'

    # -- publishing ------------------------------------------------------------------------------
    publish_batch_messages_max: Annotated[int, Field(ge=1, le=65535)] = 1000
    """Messages the broker may group into one entry (server-side batching; 1 disables it)."""
    publish_batch_bytes_max: PositiveInt = 128 * 1024
    """Payload bytes of one batch entry (a larger single message still goes alone)."""
    publish_inflight_entries_max: PositiveInt = 4
    """Entries of one topic in flight to the bookies before new messages wait in the batch being built (see
    ``publish_pipeline_batch_messages_min``). ``magnetar standalone`` defaults to 1: its bookies share the
    broker's event loop, so pipelining buys no parallelism there."""
    publish_pipeline_batch_messages_min: PositiveInt = 32
    """While an entry is in flight, a batch is pipelined next to it only once it holds this many messages (or
    a quarter of ``publish_batch_bytes_max``); smaller batches wait for the entry in flight. Pipelining uses
    the bookies' CPUs under heavy load; at moderate rates bigger batches save CPU per message. Measured on a
    3-bookie cluster on 2 cores at 5,000 msgs/s: publish p99 10.5 ms when every batch was pipelined, 7.1 ms
    with one entry in flight (RESULTS.md). 400 was tried (2026-11-22, RESULTS.md): binary p99 at 5,000 and
    20,000 msgs/s a little lower, JSON throughput lower (39k against 49k msgs/s over four pairs): kept 32."""
    producer_pending_messages_max: PositiveInt = 1000
    """Upper bound of a producer's ``maxPendingMessages``: unacknowledged sends before the broker stops
    reading that producer's socket (back-pressure instead of Pulsar's queue-full error)."""

    # -- dispatching -----------------------------------------------------------------------------
    dispatch_read_entries_max: PositiveInt = 100
    """Entries read from the cursor in one batch (fewer when consumers have fewer permits)."""
    dispatch_redelivery_messages_max: PositiveInt = 10_000
    """Messages waiting for redelivery in one subscription above which no new entries are read."""
    dispatch_delayed_messages_max: Annotated[int, Field(gt=0, le=100_000_000)] = 1_000_000
    """Delayed entries one Shared or Key_Shared subscription holds back (its delayed-delivery tracker: 16
    bytes each plus about 200 per tick in use, about 17 MB at the default with a 1 s tick) above which it
    reads no new entries until some are due; a batch entry counts once. See docs/delayed_delivery.md."""
    consumer_ack_timeout_tick_ms: PositiveInt = 100
    """Granularity of ack-timeout and negative-ack redelivery timers."""
    # consumer_unacked_messages_max (maxUnackedMessagesPerConsumer): TopicPolicyDefaults'
    consumer_unacked_bytes_max: PositiveInt = 16 * MIB
    """The same bound in payload bytes: the broker holds unacknowledged messages for redelivery."""

    # -- HTTP / WebSocket server -------------------------------------------------------------
    http: HttpLimits = Field(default_factory=HttpLimits)
    """The HTTP and WebSocket server's limits (:class:`HttpLimits`, each also reached by its flat name:
    ``ws_frame_bytes_max``, ``MAGNETAR_WS_FRAME_BYTES_MAX``); it listens on ``bind_address``:``http_port``."""
    ws_close_flush_timeout_ms: Annotated[int, Field(gt=0, le=60_000)] = 5_000
    """When the broker ends a session (unload, shutdown), how long the frames already queued for the client -
    receipts of stored messages above all - may take to go out before the Close is sent."""

    # -- Pulsar's binary protocol (the ports: BrokerServicePortSettings') ----------------------------
    keep_alive_interval_seconds: Annotated[int, Field(ge=1, le=3600)] = 30
    """Pulsar's ``keepAliveIntervalSeconds``: a binary connection must send its CONNECT within this; after
    it, a PING goes out once a whole interval passed without a command from the client, and a PING still
    unanswered at the next tick ends the connection (a silent client is gone within about three
    intervals)."""
    advertised_listeners: Annotated[str, Field(max_length=ADVERTISED_LISTENERS_CHARS_MAX)] = ""
    """Pulsar's ``advertisedListeners``: named binary addresses for clients on other networks,
    ``name:pulsar://host:port,name:pulsar+ssl://host:port,...`` (at most one URL of each kind per name; see
    :mod:`magnetar.broker.wire.listeners` for the bounds). A LOOKUP naming a listener
    (``advertised_listener_name``; the Python client's ``listener_name``) or an HTTP lookup with
    ``listenerName`` / ``X-Pulsar-ListenerName`` gets the owner's address on that listener; an unknown name
    is refused. Empty: off."""
    internal_listener_name: str | None = None
    """Pulsar's ``internalListenerName``: the listener of ``advertised_listeners`` whose URLs are the broker's
    own (what a lookup naming no listener answers, and what other brokers register for it); unset: the first
    one named."""
    max_message_size: Annotated[int, Field(ge=16 * 1024, le=MAX_MESSAGE_SIZE_DEFAULT)] = (
        MAX_MESSAGE_SIZE_DEFAULT
    )
    """Pulsar's ``maxMessageSize``, in bytes (payload of one SEND): sent in CONNECTED, so the official clients
    refuse a larger message themselves (``MessageTooBig``) or, with chunking on, split it into chunks of this
    size; a frame beyond it plus 10 KiB ends the connection. At most the 5 MiB default (the bookie frames
    are sized for it)."""
    chunked_message_bytes_max: Annotated[int, Field(ge=16 * 1024, le=2**31 - 1)] = (
        CHUNKED_MESSAGE_BYTES_MAX_DEFAULT
    )
    """The largest whole message a chunk may belong to (its ``total_chunk_msg_size``), in bytes. Pulsar's
    broker has no such bound; Magnetar refuses a chunk claiming more (``SEND_ERROR MetadataError``), so that
    no consumer is told to reassemble more than this."""

    # -- metrics -------------------------------------------------------------------------------------
    expose_topic_level_metrics_in_prometheus: bool = True
    """Pulsar's ``exposeTopicLevelMetricsInPrometheus``: per-topic (and per-subscription) figures on
    ``/metrics``; false sums them per namespace, so a scrape no longer grows with the number of topics."""
    metrics_step_ms: Annotated[float, Field(ge=0.1, le=100)] = 2.0
    """Longest stretch a ``/metrics`` scrape formats without letting other tasks run."""
    metrics_chunk_bytes: Annotated[int, Field(ge=1024, le=4 * MIB)] = 64 * 1024
    """Most text formatted per step of a scrape (the body is sent chunk by chunk)."""

    # -- process ---------------------------------------------------------------------------------------
    gc_tuning: bool = True
    """``magnetar broker`` freezes start-up objects and raises the GC thresholds (see ``tune_gc``)."""

    @model_validator(mode="before")
    @classmethod
    def _compose_layers(cls, data: Any) -> Any:
        """Flat names of the composed layers into their tables (:func:`nest_flat`)."""
        if not isinstance(data, dict):
            return data
        nested, _ = nest_flat(cls, data)
        return nested

    @field_validator("advertised_listeners")
    @classmethod
    def _check_listeners(cls, value: str) -> str:
        parse_advertised_listeners(value)  # ValueError naming the setting and the fault
        return value

    @model_validator(mode="after")
    def _check_relations(self) -> Self:
        check_size_chain(**self.size_chain())
        if self.internal_listener_name is not None:
            names = [listener.name for listener in self.listeners()]
            if self.internal_listener_name not in names:
                raise ValueError(
                    f"internal_listener_name {shown_name(self.internal_listener_name)} is not a listener of "
                    f"advertised_listeners (which names {names or 'none'})"
                )
        if self.broker_service_port_tls is not None and (
            self.tls_certificate_file is None or self.tls_key_file is None
        ):
            raise ValueError("broker_service_port_tls needs tls_certificate_file and tls_key_file")
        if (
            self.ws_proxy_enabled
            and self.broker_client_tls_enabled
            and self.tls_require_trusted_client_cert
            and self.http_port_tls is not None
        ):
            # The brokers of a cluster share their TLS settings: the owners' TLS ports want a client
            # certificate, and the owner proxy's upstream sessions have none to present.
            raise ValueError(
                "the owner proxy could not reach other brokers: broker_client_tls_enabled sends its upstream "
                "sessions to their TLS port, where tls_require_trusted_client_cert asks for a client "
                "certificate the proxy does not present; set broker_client_tls_enabled=false (the hop then "
                "uses the owners' plain port) or ws_proxy_enabled=false (sessions on a non-owner get 307)"
            )
        return self

    def binary_ssl_context(self) -> ssl.SSLContext | None:
        """The server context of the binary protocol's TLS port (None without ``broker_service_port_tls``):
        the same certificate files, client-certificate rule and protocol floor as the HTTPS port's."""
        if (
            self.broker_service_port_tls is None
            or self.tls_certificate_file is None
            or self.tls_key_file is None
        ):
            return None
        return server_ssl_context(
            self.tls_certificate_file,
            self.tls_key_file,
            trust_certs_file=self.tls_trust_certs_file,
            require_client_cert=self.tls_require_trusted_client_cert,
        )

    def listeners(self) -> tuple[AdvertisedListener, ...]:
        """``advertised_listeners``, parsed."""
        return parse_advertised_listeners(self.advertised_listeners)

    def internal_listener(self) -> AdvertisedListener | None:
        """The listener whose URLs are the broker's own (``internal_listener_name``, else the first); None
        without ``advertised_listeners``."""
        listeners = self.listeners()
        if not listeners:
            return None
        name = self.internal_listener_name or listeners[0].name
        return next(listener for listener in listeners if listener.name == name)

    def advertised_host(self) -> str:
        return advertised_host_for(self.advertised_address, self.bind_address)

    def http_tls_settings(self) -> HttpSettings:
        """The HTTP settings of the TLS port (``http_port_tls``), otherwise those of the plain port."""
        return self.http_settings().model_copy(update={"http_port": self.http_port_tls or 0})

    def http_settings(self) -> HttpSettings:
        """The HTTP server's settings: its limits, the broker's address and its plain port."""
        return HttpSettings.model_validate(
            {**self.http.model_dump(), "http_bind_address": self.bind_address, "http_port": self.http_port}
        )

    def policy_defaults(self) -> BrokerPolicyDefaults:
        """As :class:`TopicPolicyDefaults`', with the managed ledger's ``mark_delete_rate_per_s`` as the
        persistence policy's default mark-delete rate (Pulsar's
        ``managedLedgerDefaultMarkDeleteRateLimit``)."""
        defaults = super().policy_defaults()
        return dataclasses.replace(defaults, mark_delete_rate=self.managed_ledger.mark_delete_rate_per_s)

    def managed_ledger_settings(self, rng: random.Random | None = None) -> ManagedLedgerSettings:
        """The managed ledger's settings; without ``managed_ledger_password`` the password of new ledgers is
        drawn from ``rng`` (default: the operating system's randomness), ``LEDGER_PASSWORD_BYTES`` bytes."""
        password = self.ledger_password()
        if password is None:
            password = (rng or random.SystemRandom()).randbytes(LEDGER_PASSWORD_BYTES)
        return ManagedLedgerSettings.model_validate(
            {
                **self.managed_ledger.model_dump(),
                **self.quorum(),
                "password": password,
                "digest_type": self.ledger_digest_type(),
                "metadata_operation_timeout_s": self.metadata_operation_timeout_ms / 1000,
            }
        )

    def client_settings(self) -> ClientSettings:
        """The replication client's settings: its own, with the broker's quorum as its default."""
        return ClientSettings.model_validate({**self.client.model_dump(), **self.quorum()})

    def size_chain(self) -> dict[str, Any]:
        """The broker's links of the message size chain (:mod:`~magnetar.bookkeeper.protocol.size_chain`):
        WebSocket message -> entry payload -> its own bookie connections' frames (BookKeeper's 5 MiB)."""
        return {
            "ws_frame": SizeLimit("ws_frame_bytes_max", self.http.ws_frame_bytes_max),
            "entry_payload": SizeLimit("entry_payload_bytes_max", self.client.entry_payload_bytes_max),
            "bookie_frames": (
                SizeLimit("the broker's bookie frames", FRAME_BYTES_MAX_DEFAULT, settable=False),
            ),
        }

    def quorum(self) -> dict[str, int]:
        """The default quorum of new ledgers, as the layers' settings take it."""
        return {name: getattr(self, name) for name in QuorumSettings.model_fields}
