"""GET_TOPICS_OF_NAMESPACE over Pulsar's binary protocol, for the front door (:mod:`.binary_door`): pattern
consumers poll the topics of their pattern's namespace with it.

Theory of operation: the mode is checked, the namespace parsed, the caller authorized as Pulsar's broker
authorizes it (``consume`` on the namespace: :meth:`~magnetar.broker.security.BrokerSecurity.
authorize_namespace_topics`), the service lists the namespace's topics (protocol-neutral:
:mod:`magnetar.broker.namespace_topics`), and the sans-IO codec
(:mod:`magnetar.broker.protocols.pulsar_binary.topic_list`) applies the pattern and the hash and builds the
answer. An answer that would not fit a frame is refused with an ERROR naming the size rather than cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.bookkeeper.runtime.auth.authentication import Principal
from magnetar.broker.core import ServiceError
from magnetar.broker.protocols.pulsar_binary.commands import (
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_error,
)
from magnetar.broker.protocols.pulsar_binary.errors import server_error_of
from magnetar.broker.protocols.pulsar_binary.framing import MAX_MESSAGE_SIZE_DEFAULT
from magnetar.broker.protocols.pulsar_binary.topic_list import GetTopics, Mode, encode_topics_answer
from magnetar.broker.wire import InvalidTopicNameError, NamespaceName

if TYPE_CHECKING:
    from magnetar.broker.sessions.host import SessionHost


async def answer_get_topics(
    service: SessionHost,
    principal: Principal,
    command: GetTopics,
) -> bytes:
    """The command that answers ``command``: GET_TOPICS_OF_NAMESPACE_RESPONSE or ERROR."""
    request_id = command.request_id
    try:
        mode = Mode(command.mode)
    except ValueError:
        return encode_error(request_id, ServerError.NotAllowedError, f"unknown mode {command.mode}")
    try:
        namespace = NamespaceName.parse(command.namespace)
        await service.security.authorize_namespace_topics(principal, namespace)
        topics = await service.namespace_topics(
            namespace,
            persistent=mode is not Mode.NON_PERSISTENT,
            non_persistent=mode is not Mode.PERSISTENT,
        )
    except InvalidTopicNameError as exc:
        return encode_error(request_id, ServerError.MetadataError, f"Invalid namespace: {exc}")
    except ServiceError as exc:
        return encode_error(request_id, server_error_of(exc), str(exc))
    answer = encode_topics_answer(command, topics)
    if len(answer) > MAX_MESSAGE_SIZE_DEFAULT:
        reason = f"the topics of {namespace} take {len(answer)} bytes, more than a frame holds"
        return encode_error(request_id, ServerError.NotAllowedError, reason)
    return answer
