"""``maxUnackedMessagesPerSubscription`` in the dispatcher, as Pulsar's: a Shared or Key_Shared subscription
whose consumers hold the bound's worth of unacknowledged messages together gets nothing more until they are
below half of it; Exclusive and Failover subscriptions are not bound; the stats say when it is blocked; a
policy change applies to a running subscription. A real subscription and dispatcher over an in-memory ledger,
under trio's mock clock."""

from __future__ import annotations

import pytest
from fixtures.dispatch_harness import entry, run_for, setup

from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.wire.message_id import MessageId

ENTRIES = [entry(f"m{i}".encode()) for i in range(20)]


@pytest.mark.parametrize("sub_type", [SubscriptionType.SHARED, SubscriptionType.KEY_SHARED])
async def test_blocked_at_the_bound_and_released_below_half(sub_type: SubscriptionType) -> None:
    sub, sink, _, _ = setup(ENTRIES, sub_type)
    sub.dispatcher.set_unacked_max(6)
    await run_for(sub, 1)
    assert len(sink.got) == 6
    assert sub.dispatcher.blocked_on_unacked
    (consumer,) = sub.consumers
    keys = list(consumer.pending)
    for ledger_id, entry_id, _ in keys[:3]:  # 3 left: not below half of 6
        assert sub.ack(consumer, MessageId(ledger_id, entry_id))
    await run_for(sub, 1)
    assert len(sink.got) == 6
    ledger_id, entry_id, _ = keys[3]
    assert sub.ack(consumer, MessageId(ledger_id, entry_id))  # 2 left: below half, dispatching again
    await run_for(sub, 1)
    assert len(sink.got) == 10  # up to the bound again: 2 + 4
    assert sub.dispatcher.blocked_on_unacked


async def test_exclusive_is_not_bound_and_a_change_applies_to_a_running_subscription() -> None:
    exclusive, got, _, _ = setup(ENTRIES, SubscriptionType.EXCLUSIVE)
    exclusive.dispatcher.set_unacked_max(3)
    await run_for(exclusive, 1)
    assert len(got.got) == 20

    shared, sink, _, _ = setup(ENTRIES, SubscriptionType.SHARED)
    shared.dispatcher.set_unacked_max(3)
    await run_for(shared, 1)
    assert len(sink.got) == 3
    shared.dispatcher.set_unacked_max(0)  # removed: no bound
    await run_for(shared, 1)
    assert len(sink.got) == 20
    assert not shared.dispatcher.blocked_on_unacked
