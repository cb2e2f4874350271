"""KV-cache transfer from a prefill worker to a decode worker.

A prompt's KV cache crosses the link in ``latency_us + bytes / bandwidth``. Each rank of the
prefill TP group sends its shard and each rank of the decode group receives its own, over its
own GPU's link, in parallel; the slower side sets the time, so the bytes per link are the
tokens times the larger of the two pools' per-rank KV bytes per token (a rank holds
``ceil(kv_heads / tp)`` heads). Transfers into one decode worker share its ingress: they cross
it one at a time, first come first served, each at the full bandwidth (so the link carries at
most its bandwidth, and a burst of transfers queues).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynosim.config import DeploymentConfig
    from dynosim.perf.deployment import DeploymentPerf


class KVLinks:
    """The ingress links of the decode workers and the transfer time of a prompt."""

    def __init__(self, *, bytes_per_token: int, gbps: float, latency_us: float) -> None:
        self.bytes_per_token = bytes_per_token
        self.us_per_byte = 8.0 / (gbps * 1e3)  # gigabits per second -> microseconds per byte
        self.latency_us = latency_us
        self._free_at: dict[int, int] = {}
        self.bytes_sent = 0
        self.transfers = 0

    @classmethod
    def between(
        cls, config: DeploymentConfig, prefill: DeploymentPerf, decode: DeploymentPerf
    ) -> KVLinks:
        """The links of ``config``'s decode workers, from pools of these performances."""
        from dynosim.perf.deployment import kv_link

        gbps, latency_us = kv_link(config)
        return cls(
            bytes_per_token=max(prefill.kv_bytes_per_token, decode.kv_bytes_per_token),
            gbps=gbps,
            latency_us=latency_us,
        )

    def duration_us(self, tokens: int) -> int:
        """Time on the link of ``tokens`` tokens' KV cache (the latency alone for none)."""
        return math.ceil(self.latency_us + max(0, tokens) * self.bytes_per_token * self.us_per_byte)

    def reserve(self, worker: int, now_us: int, tokens: int) -> int:
        """Queue a transfer of ``tokens`` into decode worker ``worker``; when it arrives."""
        free = self._free_at.get(worker, 0)
        start = free if free > now_us else now_us
        end = start + self.duration_us(tokens)
        self._free_at[worker] = end
        self.bytes_sent += tokens * self.bytes_per_token
        self.transfers += 1
        return end
