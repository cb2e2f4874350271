"""Mutable per-request state inside one engine worker."""

from __future__ import annotations

from dynosim.types import HASH_BLOCK_TOKENS, Request


class RunningRequest:
    """A request as the engine sees it, from routing to completion.

    A request is waiting, prefilling (``computed < target``) or decoding. While decoding, its
    progress is not stored per step: the worker's decode step counter ``decode_clock`` gives
    it, with ``generated = generated_at_join + decode_clock - clock_at_join`` and KV length
    ``kv_len_at_join + decode_clock - clock_at_join``.

    In disaggregated serving a request has two of these: the prefill leg (``max_tokens=1``:
    it leaves its worker once the prompt is computed, as Dynamo sends a prefill worker the
    request with ``max_tokens: 1``) and the decode leg, whose first ``remote`` prompt tokens
    arrive by KV transfer instead of being computed (the decode worker computes the last
    prompt token, which yields the first output token, as vLLM's NIXL connector does).
    """

    __slots__ = (
        "admitted_us",
        "blocks",
        "cached_tokens",
        "clock_at_join",
        "computed",
        "enqueued_us",
        "extra_blocks",
        "finish_step",
        "first_token_us",
        "generated",
        "generated_at_join",
        "hashes",
        "kv_len_at_join",
        "max_tokens",
        "n_units_seen",
        "preemptions",
        "remote",
        "req",
        "reserved",
        "seq",
        "target",
        "units",
    )

    def __init__(
        self,
        req: Request,
        *,
        prefix_caching: bool,
        max_tokens: int | None = None,
        remote: int = 0,
    ) -> None:
        self.req = req
        self.max_tokens = req.output_tokens if max_tokens is None else max_tokens
        self.remote = remote
        self.enqueued_us = -1
        self.admitted_us = -1
        full_units = req.input_tokens // HASH_BLOCK_TOKENS
        self.hashes = req.block_hashes[:full_units] if prefix_caching else ()
        self.target = req.input_tokens
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        self.units: list[int] = []
        self.n_units_seen = 0
        self.seq = -1
        self.cached_tokens = 0
        self.first_token_us = -1
        self.preemptions = 0
        self.clock_at_join = 0
        self.generated_at_join = 0
        self.kv_len_at_join = 0
        self.finish_step = -1
        # Holds the KV blocks of its whole output from admission (TRT-LLM's
        # GUARANTEED_NO_EVICT): it takes no block while decoding.
        self.reserved = False
        # KV blocks held from admission to the end besides the paged ones: the tokens that
        # speculative decoding adds beyond one per step (see dynosim.perf.speculative).
        self.extra_blocks = 0
