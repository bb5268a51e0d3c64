"""The sans-IO core of a session the owner proxy fans out over a partitioned topic's partitions (one upstream
session per partition: :mod:`magnetar.broker.owner_proxy.fanout` runs it). A :class:`Fan` says what each
frame turns into - frames for partitions, frames for the client, permits to grant - and nothing else: the
relay that carries them knows no protocol. Each adapter gives its producer's fan (what a publish request
routes to, how the answers merge: :meth:`~.adapter.ProtocolAdapter.producer_fan`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

Frame = str | bytes


@dataclass
class Routed:
    """What one frame turns into: frames for partitions (in order), frames for the client, and permits to
    grant to partitions (pull mode)."""

    partitions: list[tuple[int, Frame]] = field(default_factory=list)
    client: list[Frame] = field(default_factory=list)
    permits: dict[int, int] = field(default_factory=dict)

    def grant(self, partition: int, count: int) -> None:
        self.permits[partition] = self.permits.get(partition, 0) + count


class Fan:
    """The sans-IO core of a fanned-out session: the base forwards nothing it does not understand."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.unsubscribing = False
        """An unsubscribe went to every partition: their 1000 closes end the session normally."""

    def opening(self) -> Routed:
        """Frames sent to the partitions when the session starts."""
        return Routed()

    def from_client(self, message: Frame) -> Routed:
        raise NotImplementedError

    def from_partition(self, partition: int, messages: Sequence[Frame]) -> Routed:
        return Routed(client=list(messages))

    def permit_frame(self, count: int) -> Frame:
        """A pull-mode permit for one partition's session, in the session's protocol."""
        raise NotImplementedError
