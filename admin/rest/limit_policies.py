"""The routes of every policy in :data:`~magnetar.broker.policies.catalogue.CATALOGUE`, built from the table:
for each, ``GET/POST/DELETE /admin/v2/namespaces/{t}/{ns}/<ns_path>`` and, where Pulsar has one,
``GET/POST/DELETE /admin/v2/persistent/{t}/{ns}/{topic}/<topic_path>``.

A namespace write is one compare-and-set of the namespace's policies node (409 on a lost race); a topic
write one of the topic's policies node. Both are seen by every broker through the metadata store's watch
(:mod:`magnetar.broker.topic_policy_watch`), so a loaded topic follows without an unload. GET answers 204
when the level does not set the policy (Pulsar's ``null``); a topic GET with ``?applied=true`` answers the
effective value (topic, partitioned topic, namespace, broker). DELETE unsets the level's value.

Rates (``publishRate``, ``dispatchRate``, ``subscriptionDispatchRate``, ``subscribeRate``, and one
subscription's own ``.../{topic}/{subscription}/dispatchRate``): stored as given, no value checked, as Pulsar;
one that limits nothing (every limit at 0 or below; a subscribe rate's period too) is read as none, so the
next level's applies. A topic POST of ``null`` changes nothing (204), as Pulsar's rate setters.

Validation (:func:`check`), with Pulsar's statuses and wording: a negative count is 412 ("maxProducersPerTopic
must be 0 or more" at namespace level, the topic route's own wording at topic level); a persistence policy
out of ``0 < E, W, A <= managedLedgerMax*`` or not ``E >= W >= A`` is 400; an auto-topic-creation override
that is inconsistent is 412 ("Invalid configuration for autoTopicCreationOverride. the detail is ..."), its
partitions beyond ``maxNumPartitionsPerPartitionedTopic`` 406; a ``delayedDelivery`` policy with a negative
``tickTime`` or ``maxDeliveryDelayInMillis`` 412 (Pulsar stores it unchecked; a tick of 0 acts as 1 ms).
A body of the wrong JSON type, or a number outside Java's ``int``, is 400 (:mod:`.models`); unknown fields
are ignored, as Pulsar's mapper does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.admin.rest.context import PARTITIONS_MAX, AdminContext
from magnetar.admin.rest.framework import (
    AdminError,
    AuthoritativeQuery,
    Call,
    Endpoint,
    no_content,
    ok,
    ok_or_empty,
)
from magnetar.admin.rest.models import (
    AutoSubscriptionCreationBody,
    AutoTopicCreationBody,
    DelayedDeliveryBody,
    DispatchRateBody,
    InactiveTopicPoliciesBody,
    Int32,
    PersistenceBody,
    PublishRateBody,
    StrictBool,
    SubscribeRateBody,
)
from magnetar.admin.rest.names import (
    namespace_of,
    require_namespace,
    require_topic,
    subscription_of,
    topic_of,
)
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.policies import (
    CATALOGUE,
    RATE_KINDS,
    SUBSCRIPTION_RATES_MAX,
    AutoSubscriptionCreationOverride,
    AutoTopicCreationOverride,
    DelayedDeliveryPolicies,
    DispatchRate,
    InactiveTopicPolicies,
    PersistencePolicies,
    Policies,
    PolicySpec,
    PublishRate,
    SubscribeRate,
    TopicPolicies,
    first_set,
    normalize_dispatch,
    topic_level_update,
    topic_level_value,
)
from magnetar.broker.wire import TopicName

TAG = "policies"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
TOPIC_TYPES = ("partitioned", "non-partitioned")


class TopicGetQuery(AuthoritativeQuery):
    applied: bool = False
    isGlobal: bool = False


class TopicSetQuery(AuthoritativeQuery):
    isGlobal: bool = False


BODIES: dict[str, Any] = {
    "int": Int32,
    "bool": StrictBool,
    "persistence": PersistenceBody,
    "inactive": InactiveTopicPoliciesBody,
    "auto_topic": AutoTopicCreationBody,
    "auto_subscription": AutoSubscriptionCreationBody,
    "delayed": DelayedDeliveryBody,
    "publish_rate": PublishRateBody,
    "dispatch_rate": DispatchRateBody,
    "subscribe_rate": SubscribeRateBody,
}
STORED: dict[str, Any] = {
    "int": int,
    "bool": bool,
    "persistence": PersistencePolicies,
    "inactive": InactiveTopicPolicies,
    "auto_topic": AutoTopicCreationOverride,
    "auto_subscription": AutoSubscriptionCreationOverride,
    "delayed": DelayedDeliveryPolicies,
    "publish_rate": PublishRate,
    "dispatch_rate": DispatchRate,
    "subscribe_rate": SubscribeRate,
}


# -- validation (pure: tested by table) ------------------------------------------------------------------


def persistence_error(p: PersistenceBody, ctx: AdminContext) -> str | None:
    s = ctx.settings
    for name, value, most in (
        ("Ensemble", p.bookkeeperEnsemble, s.managed_ledger_max_ensemble_size),
        ("WriteQuorum", p.bookkeeperWriteQuorum, s.managed_ledger_max_write_quorum),
        ("AckQuorum", p.bookkeeperAckQuorum, s.managed_ledger_max_ack_quorum),
    ):
        if not 0 < value <= most:
            return f"Bookkeeper-{name} must be <= {most} and > 0."
    e, w, a = p.bookkeeperEnsemble, p.bookkeeperWriteQuorum, p.bookkeeperAckQuorum
    if not e >= w >= a:
        return f"Bookkeeper Ensemble ({e}) >= WriteQuorum ({w}) >= AckQuorum ({a})"
    return None


def auto_topic_error(o: AutoTopicCreationBody) -> str | None:
    """Pulsar's ``validateOverride``: only an override that allows creation is checked."""
    if not o.allowAutoTopicCreation:
        return None
    if o.topicType not in TOPIC_TYPES:
        return f"Unknown topic type [{o.topicType}]"
    if o.topicType == "partitioned":
        if o.defaultNumPartitions is None:
            return "[defaultNumPartitions] cannot be null when the type is partitioned."
        if o.defaultNumPartitions <= 0:
            return "[defaultNumPartitions] cannot be less than 1 for partition type."
    elif o.defaultNumPartitions is not None:
        return "[defaultNumPartitions] is not allowed to be set when the type is non-partition."
    return None


def check(spec: PolicySpec, body: Any, ctx: AdminContext, *, topic_level: bool) -> Any:
    """The value to store for ``body``, or :class:`AdminError` with Pulsar's status and reason."""
    if spec.kind == "bool":
        return bool(body)
    if spec.kind == "int":
        if body < 0:
            if spec.field == "subscription_expiration_time_minutes":
                raise AdminError(412, "Invalid value for subscription expiration time")
            if spec.field == "deduplicationSnapshotIntervalSeconds" and not topic_level:
                raise AdminError(412, spec.ns_name)
            raise AdminError(412, spec.topic_error if topic_level else f"{spec.ns_name} must be 0 or more")
        return int(body)
    if spec.kind == "persistence":
        error = persistence_error(body, ctx)
        if error is not None:
            raise AdminError(400, error)
        return PersistencePolicies.model_validate(body.model_dump())
    if spec.kind == "auto_topic":
        error = auto_topic_error(body)
        if error is not None:
            raise AdminError(
                412, f"Invalid configuration for autoTopicCreationOverride. the detail is {error}"
            )
        partitions = body.defaultNumPartitions
        configured = ctx.settings.max_num_partitions_per_partitioned_topic
        limit = min(configured, PARTITIONS_MAX) if configured > 0 else PARTITIONS_MAX
        if body.allowAutoTopicCreation and partitions is not None and partitions > limit:
            raise AdminError(406, f"Number of partitions should be less than or equal to {limit}")
        return AutoTopicCreationOverride.model_validate(body.model_dump())
    if spec.kind == "publish_rate":  # stored as given; a rate that limits nothing is no rate (resolve)
        return PublishRate.model_validate(body.model_dump())
    if spec.kind == "dispatch_rate":
        return DispatchRate.model_validate(body.model_dump())
    if spec.kind == "subscribe_rate":
        return SubscribeRate.model_validate(body.model_dump())
    if spec.kind == "inactive":
        mode = body.inactiveTopicDeleteMode
        known = mode in ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")
        return InactiveTopicPolicies.model_validate(
            {**body.model_dump(), "inactiveTopicDeleteMode": mode if known else None}
        )
    if spec.kind == "delayed":
        for name in ("tickTime", "maxDeliveryDelayInMillis"):
            if getattr(body, name) < 0:
                raise AdminError(412, f"Invalid value for delayedDelivery: {name} must be 0 or more")
        return DelayedDeliveryPolicies.model_validate(body.model_dump())
    return AutoSubscriptionCreationOverride.model_validate(body.model_dump())


# -- handlers ------------------------------------------------------------------------------------------

Handler = Callable[[Call], Awaitable[HttpResponse]]


def _answer(value: Any) -> HttpResponse:
    return ok_or_empty(value)


def namespace_handlers(spec: PolicySpec) -> tuple[Handler, Handler, Handler]:
    field = spec.field

    async def get(call: Call) -> HttpResponse:
        policies = await require_namespace(call.context, namespace_of(call))
        return _answer(getattr(policies, field))

    async def post(call: Call) -> HttpResponse:
        namespace = namespace_of(call)
        value = check(spec, call.body, call.context, topic_level=False)
        await require_namespace(call.context, namespace)
        await call.context.policies.update_namespace(
            str(namespace), lambda p: p.model_copy(update={field: value})
        )
        return no_content()

    async def delete(call: Call) -> HttpResponse:
        namespace = namespace_of(call)
        await require_namespace(call.context, namespace)
        await call.context.policies.update_namespace(
            str(namespace), lambda p: p.model_copy(update={field: None})
        )
        return no_content()

    return get, post, delete


async def _topic_target(call: Call) -> tuple[TopicName, Policies]:
    if not call.context.settings.topic_level_policies_enabled:
        raise AdminError(405, "Topic level policies is disabled, to enable the topic level policy and retry.")
    topic = topic_of(call)
    if topic.is_partition:
        raise AdminError(412, "Not allowed to set/get topic policy for a partition")
    ns = await require_namespace(call.context, topic.namespace_name)
    await require_topic(call.context, topic)
    return topic, ns


async def _topic_levels(ctx: AdminContext, topic: TopicName) -> list[TopicPolicies]:
    return [await ctx.policies.get_topic_policies(str(topic.namespace_name), topic.local_name)]


def topic_handlers(spec: PolicySpec) -> tuple[Handler, Handler, Handler]:
    field = spec.field

    async def update(call: Call, value: Any) -> None:
        topic, _ = await _topic_target(call)
        fields = topic_level_update(field, value)
        await call.context.policies.update_topic_policies(
            str(topic.namespace_name), topic.local_name, lambda p: p.model_copy(update=fields)
        )

    async def get(call: Call) -> HttpResponse:
        topic, ns = await _topic_target(call)
        levels = await _topic_levels(call.context, topic)
        if call.query_as(TopicGetQuery).applied:
            return ok(first_set(field, levels, ns, call.context.settings.policy_defaults()))
        return _answer(topic_level_value(field, levels[0]))

    async def post(call: Call) -> HttpResponse:
        # A null body unsets the topic's value, as Pulsar's setters store the null they are given - but
        # the rate setters ignore a null (Pulsar's answer 204 and change nothing).
        if call.body is None and spec.kind in RATE_KINDS:
            await _topic_target(call)
            return no_content()
        value = None if call.body is None else check(spec, call.body, call.context, topic_level=True)
        await update(call, value)
        return no_content()

    async def delete(call: Call) -> HttpResponse:
        await update(call, None)
        return no_content()

    return get, post, delete


def subscription_rate_handlers() -> tuple[Handler, Handler, Handler]:
    """``.../{topic}/{subscription}/dispatchRate``: one subscription's own dispatch rate (over the topic's
    ``subscriptionDispatchRate``)."""

    def change(call: Call, value: DispatchRate | None) -> Callable[[TopicPolicies], TopicPolicies]:
        name = subscription_of(call)

        def apply(p: TopicPolicies) -> TopicPolicies:
            rates = dict(p.subscription_dispatch_rates)
            if value is None:
                rates.pop(name, None)
            else:
                if name not in rates and len(rates) >= SUBSCRIPTION_RATES_MAX:
                    raise AdminError(
                        412, f"At most {SUBSCRIPTION_RATES_MAX} subscriptions may have a dispatch rate"
                    )
                rates[name] = value
            return p.model_copy(update={"subscription_dispatch_rates": rates})

        return apply

    async def get(call: Call) -> HttpResponse:
        topic, ns = await _topic_target(call)
        levels = await _topic_levels(call.context, topic)
        own = levels[0].subscription_dispatch_rates.get(subscription_of(call))
        if call.query_as(TopicGetQuery).applied:
            effective = normalize_dispatch(own) if own is not None else None
            if effective is None:
                defaults = call.context.settings.policy_defaults()
                effective = first_set("subscription_dispatch_rate", levels, ns, defaults)
            return ok(effective)
        return _answer(own)

    async def post(call: Call) -> HttpResponse:
        topic, _ = await _topic_target(call)
        if call.body is None:
            return no_content()
        value = DispatchRate.model_validate(call.body.model_dump())
        if normalize_dispatch(value) is None:  # Pulsar ignores a rate that limits nothing
            return no_content()
        await call.context.policies.update_topic_policies(
            str(topic.namespace_name), topic.local_name, change(call, value)
        )
        return no_content()

    async def delete(call: Call) -> HttpResponse:
        topic, _ = await _topic_target(call)
        await call.context.policies.update_topic_policies(
            str(topic.namespace_name), topic.local_name, change(call, None)
        )
        return no_content()

    return get, post, delete


def endpoints() -> list[Endpoint]:
    e404 = {404: "Namespace does not exist", 412: "Namespace name is not valid"}
    e_set = {**e404, 400: "Invalid policy", 409: "Concurrent modification", 412: "Invalid policy"}
    t404 = {404: "Namespace or topic does not exist", 405: "Topic level policies are disabled",
            412: "Topic name is not valid"}  # fmt: skip
    t_set = {**t404, 400: "Invalid policy", 409: "Concurrent modification", 412: "Invalid policy"}
    routes: list[Endpoint] = []
    for spec in CATALOGUE:
        body, stored = BODIES[spec.kind], STORED[spec.kind]
        get, post, delete = namespace_handlers(spec)
        path = f"{NS}/{spec.ns_path}"
        routes += [
            Endpoint("GET", path, get, f"Get {spec.ns_path}", TAG, query=AuthoritativeQuery, response=stored,
                     status=200, errors=e404),
            Endpoint("POST", path, post, f"Set {spec.ns_path}: {spec.help}", TAG, query=AuthoritativeQuery,
                     body=body, body_required=True, errors=e_set),
            Endpoint("DELETE", path, delete, f"Remove {spec.ns_path}", TAG, query=AuthoritativeQuery,
                     errors=e_set),
        ]  # fmt: skip
        if spec.topic_path is None:
            continue
        get, post, delete = topic_handlers(spec)
        path = f"{TOPIC}/{spec.topic_path}"
        routes += [
            Endpoint("GET", path, get, f"Get topic {spec.topic_path}", TAG, query=TopicGetQuery,
                     response=stored, status=200, errors=t404),
            Endpoint("POST", path, post, f"Set topic {spec.topic_path}: {spec.help}", TAG,
                     query=TopicSetQuery, body=body, errors=t_set),
            Endpoint("DELETE", path, delete, f"Remove topic {spec.topic_path}", TAG, query=TopicSetQuery,
                     errors=t_set),
        ]  # fmt: skip
    get, post, delete = subscription_rate_handlers()
    path = f"{TOPIC}/{{subscription}}/dispatchRate"
    routes += [
        Endpoint("GET", path, get, "Get a subscription's own dispatch rate", TAG, query=TopicGetQuery,
                 response=DispatchRate, status=200, errors=t404),
        Endpoint("POST", path, post, "Set a subscription's own dispatch rate", TAG, query=TopicSetQuery,
                 body=DispatchRateBody, errors=t_set),
        Endpoint("DELETE", path, delete, "Remove a subscription's own dispatch rate", TAG,
                 query=TopicSetQuery, errors=t_set),
    ]  # fmt: skip
    return routes


def namespace_policy_paths() -> list[str]:
    return [spec.ns_path for spec in CATALOGUE]


def topic_policy_paths() -> list[str]:
    return [spec.topic_path for spec in CATALOGUE if spec.topic_path is not None]
