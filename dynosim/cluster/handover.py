"""Disaggregated serving's second leg: a prefilled request's decode worker and its KV transfer.

A prefill leg that is done is handed over at the end of its instant (:meth:`Handover.send`):
the decode router picks its worker then (unless one was committed at arrival, as conditional
disaggregation does), the KV cache crosses that worker's ingress link (:class:`KVLinks`), and
on arrival the decode leg joins the worker's queue. From the commitment to the arrival the
worker counts the request as incoming (``incoming``, ``incoming_blocks``: what the load-aware
routers read).

Why a class of its own: the simulation's wiring stays small, and the per-request path keeps
the decode worker of each request in a Python list (reading it back from the records' numpy
column cost more than the rest of the arrival's bookkeeping).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import simpy
from simpy.events import NORMAL

from dynosim.cluster.pool import WorkerPool
from dynosim.cluster.transfer import KVLinks
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.timer import at


class Handover:
    """The handover of prefilled requests to the decode pool.

    Args:
        legs: Each request's decode leg, by request id (the records' list: filled here by
            :meth:`send`).
        worker: Each request's decode worker index, by request id (the records' column:
            written at the commitment).
        transfer_us: How long each request's KV took to arrive (the records' column).

    Attributes:
        bytes_received: KV bytes that reached the decode workers so far.
    """

    def __init__(
        self,
        env: simpy.Environment,
        decode: WorkerPool,
        links: KVLinks,
        *,
        legs: list[RunningRequest | None],
        worker: npt.NDArray[np.int64],
        transfer_us: npt.NDArray[np.int64],
    ) -> None:
        self.env = env
        self.decode = decode
        self.links = links
        self._legs = legs
        self._worker = worker
        self._transfer_us = transfer_us
        self._to: list[EngineWorker | None] = [None] * len(legs)  # committed decode workers
        self.bytes_received = 0

    def commit(self, rid: int, w: EngineWorker, input_tokens: int) -> None:
        """Assign decode worker ``w`` to remote request ``rid``; it counts there from now."""
        self._worker[rid] = w.index
        self._to[rid] = w
        w.incoming += 1
        w.incoming_blocks += -(-input_tokens // w.block_size)

    def send(self, rr: RunningRequest, now: int) -> None:
        """Hand decode leg ``rr`` over at the end of instant ``now``.

        The prefill worker's step boundary calls this, and the decode workers' boundaries of
        the same instant may not have run yet (boundaries run in the order they were
        scheduled). Routing here would let a fast-forwarded decode worker, brought up to
        ``now`` by a sync, show the router a step that a stepped one had not started yet; after
        every boundary of the instant both show the same state.
        """
        rid = rr.req.id
        self._legs[rid] = rr
        at(self.env, now, NORMAL, self._on_handover, rid)

    def _on_handover(self, rid: int) -> None:
        """Pick the prefilled request's decode worker and send the KV cache to it."""
        now = int(self.env._now)
        rr = self._legs[rid]
        assert rr is not None
        w = self._to[rid]
        if w is None:
            w = self.decode.route(rr, now)
            self.commit(rid, w, rr.req.input_tokens)
        arrive = self.links.reserve(w.index, now, rr.remote)
        self._transfer_us[rid] = arrive - now
        at(self.env, arrive, NORMAL, self._on_transferred, rid)

    def _on_transferred(self, rid: int) -> None:
        """The KV cache has arrived: the decode leg joins its worker's queue."""
        rr = self._legs[rid]
        w = self._to[rid]
        assert rr is not None
        assert w is not None
        w.incoming -= 1
        w.incoming_blocks -= -(-rr.req.input_tokens // w.block_size)
        self.bytes_received += rr.remote * self.links.bytes_per_token
        w.enqueue(rr, int(self.env._now))
