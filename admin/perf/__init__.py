"""The load generators of ``magnetar perf``, shipped with the package.

They measure one Magnetar deployment from outside, as an operator would: :mod:`.produce` and :mod:`.consume`
over the WebSocket API (:mod:`.ws`, :mod:`.ws_binary` for the ``magnetar.v1`` subprotocol, :mod:`.ws_stats`;
the client is :mod:`magnetar.bookkeeper.runtime.http.ws_client`), and the lower layers in process
(:mod:`.ledger`, :mod:`.managed_ledger`, :mod:`.bookie_rpc`, :mod:`.bookie_storage`, :mod:`.compaction`). The
comparison of Magnetar with other systems and the repository's own micro-benchmarks are not shipped: they live
in ``tests/bench/``.
"""
