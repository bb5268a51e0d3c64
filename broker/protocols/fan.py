"""The sans-IO core of a session the owner proxy fans out over a partitioned topic's partitions (one upstream
session per partition: :mod:`magnetar.broker.owner_proxy.fanout` runs it). A :class:`Fan` says what each
frame turns into - frames for partitions, frames for the client, permits to grant - and nothing else: the
relay that carries them knows no protocol. Each adapter gives its producer's fan (what a publish request
routes to, how the answers merge: :meth:`~.adapter.ProtocolAdapter.producer_fan`) and its consumer's fan, a
:class:`ConsumerFan` that says only what a frame is (:meth:`~.adapter.ProtocolAdapter.consumer_fan`)."""

from __future__ import annotations

from collections import deque
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


class ConsumerFan(Fan):
    """A consumer or reader over every partition's session, protocol-neutral: the adapter's subclass says
    what a client frame asks (:meth:`from_client`, through the steps below), what a partition's frame is
    (:meth:`from_partition`: a delivery of N, an end-of-topic answer, anything else) and how to say a permit,
    an end-of-topic answer and a run of held deliveries.

    Deliveries of every partition go to the client; an ack goes to the partition its message id names, an
    unsubscribe to every partition (the session ends once all have ended), an end-of-topic question to every
    partition, answered true only if all are at their end. Pull mode (consumers): ``prefetch`` permits are
    kept granted to each partition and deliveries beyond the client's own permits are held (at most that many
    per partition), so the client never gets more than it permitted; each one handed on is granted again to
    its partition. A reader's release goes to the partition of the delivery it releases."""

    def __init__(self, partitions: int, *, pull_mode: bool, reader: bool, prefetch: int) -> None:
        super().__init__(partitions)
        self._reader = reader
        self._pull = pull_mode and not reader
        self._prefetch = prefetch
        self.client_permits = 0
        """Pull mode: permits the client granted and no delivery used yet."""
        self.held: deque[tuple[int, Frame]] = deque()
        """Pull mode: deliveries (a JSON message, a binary record) waiting for the client's permits."""
        self._queries: deque[list[int]] = deque()
        """isEndOfTopic questions asked of every partition: [answers still due, all true so far (0/1)]."""
        self._answered = [0] * partitions
        """Per partition: how many of the questions in ``_queries`` it has answered."""
        self._delivered: deque[list[int]] = deque()
        """A reader's deliveries not yet released, oldest first: [partition, messages] (at most its windows'
        worth: each partition's session delivers no more until released)."""

    # -- what the protocol says ------------------------------------------------------------------------

    def end_of_topic(self, at_end: bool) -> Frame:
        """The answer to an end-of-topic question."""
        raise NotImplementedError

    def hand_on_frames(self, held: list[Frame]) -> list[Frame]:
        """Held deliveries as the frames that carry them to the client, in order."""
        raise NotImplementedError

    # -- the steps, the same for every protocol -----------------------------------------------------------

    @property
    def unreleased(self) -> int:
        """A reader's deliveries the client has not released yet."""
        return sum(count for _, count in self._delivered)

    def opening(self) -> Routed:
        routed = Routed()
        if self._pull:
            for partition in range(self.partitions):
                routed.grant(partition, self._prefetch)
        return routed

    def _to_partition(self, partition: int, message: Frame) -> Routed:
        """An id of no partition of this topic is ignored, as a local session ignores it."""
        if 0 <= partition < self.partitions:
            return Routed(partitions=[(partition, message)])
        return Routed()

    def _everyone(self, message: Frame) -> Routed:
        return Routed(partitions=[(partition, message) for partition in range(self.partitions)])

    def _unsubscribe(self, message: Frame) -> Routed:
        self.unsubscribing = True
        return self._everyone(message)

    def _client_permits(self, count: int, message: Frame) -> Routed:
        if not self._pull:
            return self._everyone(message)  # push mode: each partition's session does what a local one does
        self.client_permits += count
        return self._hand_on(Routed())

    def _ask_end_of_topic(self, message: Frame) -> Routed:
        self._queries.append([self.partitions, 1])
        return self._everyone(message)

    def _release_one(self, partition: int, message: Frame) -> Routed:
        """A reader's release of one delivery: to ``partition`` (the one its message id names), else -1: the
        partition of the oldest unreleased delivery."""
        if 0 <= partition < self.partitions:
            for run in self._delivered:  # its oldest unreleased delivery: near the head when read in order
                if run[0] == partition:
                    run[1] -= 1
                    if run[1] == 0:
                        self._delivered.remove(run)
                    break
            return Routed(partitions=[(partition, message)])
        if self._delivered:
            head = self._delivered[0]
            head[1] -= 1
            if head[1] == 0:
                self._delivered.popleft()
            return Routed(partitions=[(head[0], message)])
        return Routed(partitions=[(0, message)])  # nothing delivered: the partition's session ignores it

    def _release(self, count: int) -> Routed:
        """A reader's release of its ``count`` oldest deliveries, as a permit to each partition."""
        routed = Routed()
        while count > 0 and self._delivered:
            head = self._delivered[0]
            taken = min(count, head[1])
            routed.grant(head[0], taken)
            head[1] -= taken
            count -= taken
            if head[1] == 0:
                self._delivered.popleft()
        routed.partitions = [(p, self.permit_frame(n)) for p, n in routed.permits.items()]
        routed.permits = {}
        return routed

    def _delivery(self, partition: int, message: Frame, count: int, routed: Routed) -> None:
        if self._pull:
            self.held.append((partition, message))
            return
        if self._reader and count:
            if self._delivered and self._delivered[-1][0] == partition:
                self._delivered[-1][1] += count
            else:
                self._delivered.append([partition, count])
        routed.client.append(message)

    def _end_of_topic(self, partition: int, at_end: bool, routed: Routed) -> None:
        index = self._answered[partition]
        if index >= len(self._queries):
            return  # an answer to no question asked through the proxy
        self._answered[partition] = index + 1
        query = self._queries[index]
        query[0] -= 1
        query[1] &= int(at_end)
        while self._queries and self._queries[0][0] == 0:
            done = self._queries.popleft()
            self._answered = [n - 1 for n in self._answered]
            routed.client.append(self.end_of_topic(bool(done[1])))

    def _hand_on(self, routed: Routed) -> Routed:
        """Pull mode: hand held deliveries on while the client has permits; grant each again upstream."""
        handed: list[Frame] = []
        while self.held and self.client_permits > 0:
            partition, message = self.held.popleft()
            self.client_permits -= 1
            routed.grant(partition, 1)
            handed.append(message)
        if handed:
            routed.client.extend(self.hand_on_frames(handed))
        return routed
