"""Mutable per-request state inside one engine worker."""

from __future__ import annotations

from dynosim.types import HASH_BLOCK_TOKENS, Request


class RunningRequest:
    """A request as the engine sees it, from routing to completion.

    A request is waiting, prefilling (``computed < target``) or decoding. While decoding, its
    progress is not stored per step: the worker's decode step counter ``S`` gives it, with
    ``generated = g0 + S - s0`` and KV length ``len0 + S - s0``.
    """

    __slots__ = (
        "blocks",
        "cached_tokens",
        "computed",
        "finish_step",
        "first_token_us",
        "g0",
        "generated",
        "hashes",
        "len0",
        "n_units_seen",
        "preemptions",
        "req",
        "s0",
        "seq",
        "target",
        "units",
    )

    def __init__(self, req: Request, *, prefix_caching: bool) -> None:
        self.req = req
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
        self.s0 = 0
        self.g0 = 0
        self.len0 = 0
        self.finish_step = -1
