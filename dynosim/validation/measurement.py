"""One measured benchmark point (:class:`Measurement`), the record every measurement reader makes.

The readers are :mod:`dynosim.validation.measurements` (AIConfigurator's silicon CSV, the plain
CSV) and :mod:`dynosim.validation.tool_exports` (benchmark tools' result files); the replay is
:mod:`dynosim.validation.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynosim.workload.client import ClientName

if TYPE_CHECKING:
    from dynosim.validation.silicon import PoolShape

__all__ = ["Measurement"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One measured point: an aggregated deployment at a closed-loop concurrency.

    Attributes:
        where: ``FILE:LINE`` of the row.
        client: The benchmark client that measured it (None: not recorded; replayed as the
            calibration profile's ``unrecorded_client`` for the backend).
        warmups: Warm-up requests the client sent (None: the client's default).
        engine: Engine fields the row states (``max_num_seqs``...).
        ep, moe_tp, attention_dp: The replica's parallelism (``concurrency`` is the clients of
            all its DP ranks together).
        kv_cache_dtype: The KV cache's element type when not the dtype's default.
        refused: Why the row cannot be replayed (None: it can).
        source: The file the row's figures came from, as the row names it (AIConfigurator's
            ``silicon_data_source`` up to its first ``;``, without ``source_file=``; empty
            for other formats). A calibration profile may name a client model per source.
        queued: Requests the benchmark harness holds beyond ``concurrency`` (the ``queued``
            client model: they wait for an engine slot, and their TTFT counts the wait).
        pools: The prefill and decode pools of a disaggregated row (None: aggregated, one
            replica of ``tp``, ``ep``, ``moe_tp``, ``attention_dp``).
        recipe: The launch recipe whose flags ``engine`` and ``kv_cache_dtype`` hold
            (``path@commit``, :mod:`dynosim.validation.recipes`; "" when not known).
        speculative: The row's speculative decoding, as a deployment's ``speculative``
            section (None: none).
        moe_activation: The activation precision of MXFP4 experts when the recipe sets it
            (a deployment's ``moe_activation``; None: the backend's default).
        fp8_scales: ``static`` when the served checkpoint ships FP8 activation scales and the
            row's model does not say so (a deployment's ``fp8_scales``; None: the model's).
    """

    where: str
    model: str
    gpu: str
    backend: str
    tp: int
    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    dtype: str = "bf16"
    mode: str = "agg"
    client: ClientName | None = None
    warmups: int | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    ep: int = 1
    moe_tp: int | None = None
    attention_dp: int = 1
    kv_cache_dtype: str | None = None
    refused: str | None = None
    source: str = ""
    queued: int = 0
    pools: tuple[PoolShape, PoolShape] | None = None
    recipe: str = ""
    speculative: dict[str, Any] | None = None
    moe_activation: str | None = None
    fp8_scales: str | None = None

    @property
    def group(self) -> tuple[str, str, str, str]:
        """``(model, gpu, backend, mode)``."""
        return (self.model, self.gpu, self.backend, self.mode)
