"""Plain data carried through the simulator: requests in, per-request records out."""

from __future__ import annotations

from dataclasses import dataclass

HASH_BLOCK_TOKENS = 512
"""Tokens covered by one prompt hash id (Mooncake's granularity; every workload uses it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One inference request as the workload describes it.

    Attributes:
        id: Position of the request in its workload (0..n-1), unique.
        arrival_s: When the request is sent, in seconds from the start. For a request that
            follows another (``after_id``), the earliest time it may be sent.
        input_tokens: Prompt length in tokens (>= 1).
        output_tokens: Tokens to generate (>= 1).
        block_hashes: One id per ``HASH_BLOCK_TOKENS``-token block of the prompt; equal leading
            ids mean a shared, cacheable prefix. Empty when the workload has no prefix data.
        session_id: Conversation the request belongs to, if any.
        after_id: Id of the request that must complete before this one is sent (the previous
            turn of a session, or the previous request of a closed-loop client), if any.
        delay_s: Think time between the completion of ``after_id`` (or the warm-up phase)
            and this request.
        after_warmup: Follows the warm-up phase instead of a request (then ``after_id`` is
            None): sent ``delay_s`` after the run's ``warmup_requests`` have all completed or
            been rejected, and not before ``arrival_s``; the first requests of a benchmark
            client's measured phase (:mod:`dynosim.workload.client`).
    """

    id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()
    session_id: int | None = None
    after_id: int | None = None
    delay_s: float = 0.0
    after_warmup: bool = False
