"""Roofline step times from the catalog: for models or GPUs AIConfigurator lacks.

One step is the sum of three op classes, each ``max(FLOPs / (peak x MFU), bytes / (HBM x BWU))``:

* linear layers: ``2 x active params x tokens / tp`` FLOPs (LM head for one token per request),
  reading every weight of the rank once per step (MoE experts: the fraction a step's tokens can
  touch, ``min(1, tokens x topk / experts)``);
* prefill attention, per request computing ``c`` tokens over ``p`` cached ones:
  ``4 x layers x heads/tp x head_dim x c x (p + c/2)`` FLOPs (causal), reading the KV of
  ``p + c`` tokens;
* decode attention over ``K`` KV tokens in all: ``4 x layers x heads/tp x head_dim x K`` FLOPs,
  reading ``K`` tokens of KV;

plus, for ``tp > 1``, two ring all-reduces per layer over NVLink
(``latency + 2 (tp-1)/tp x tokens x hidden x 2 B / bandwidth``), and the backend's framework
overhead. Only ``+ - * /`` and ``max`` are used, so the decode-only path is the same arithmetic
in Python floats and in numpy (``decode_run_us`` equals repeated ``step_us`` bit for bit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dynosim.config import DeploymentConfig
from dynosim.perf.catalog import GpuSpec, ModelSpec, gpu_spec, model_spec
from dynosim.perf.memory import EXPERT_BYTES, kv_bytes_per_token, weight_bytes
from dynosim.perf.overhead import NO_OVERHEAD, FrameworkOverhead, framework_overhead

F64 = npt.NDArray[np.float64]
MFU = 0.6  # achieved fraction of peak tensor FLOP/s
BWU = 0.8  # achieved fraction of peak HBM bandwidth (AIConfigurator's empirical factor)
NVLINK_EFF = 0.7  # achieved fraction of NVLink bandwidth in NCCL all-reduce
ALLREDUCE_LATENCY_US = 8.0  # fixed cost of one small all-reduce
LAYER_LAUNCH_US = 1.5  # kernel launches per layer not hidden by CUDA graphs


class RooflineStepTime:
    """:class:`~dynosim.perf.protocol.StepTimeModel` from peak FLOP/s and bandwidths.

    ``physical=True`` prices the hard lower bound instead: every op at the GPU's peak FLOP/s
    and HBM and NVLink bandwidth, no launch or all-reduce latency (:func:`physical_floor`).
    """

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        dtype: str,
        overhead: FrameworkOverhead,
        kv_dtype: str | None = None,
        *,
        physical: bool = False,
        expert_shards: int | None = None,
    ) -> None:
        """Precompute per-token costs (microseconds) of ``model`` on ``tp`` ``gpu``s.

        ``kv_dtype`` is the KV cache's element type (default: as ``dtype``'s KV default).
        ``expert_shards``: the GPUs the routed experts are spread over (``ep x moe_tp``;
        default ``tp``), the rest of the weights staying over ``tp``.
        """
        self.overhead = overhead
        mfu, bwu, nvlink = (1.0, 1.0, 1.0) if physical else (MFU, BWU, NVLINK_EFF)
        flops_us = gpu.flops(dtype) * mfu / 1e6  # FLOP per microsecond
        bytes_us = gpu.hbm_bytes_per_s * bwu / 1e6
        kv_tok = kv_bytes_per_token(model, tp, kv_dtype or dtype)
        head_flops = 4.0 * model.layers * (model.heads / tp) * model.head_dim
        per_weight = EXPERT_BYTES.get(dtype, 2.0)
        expert_bytes = 0.0
        if model.is_moe:  # the routed experts' weights (memory.py's bytes per expert weight)
            expert_bytes = model.expert_params * (per_weight / tp)
        self._experts = model.experts
        self._topk = model.topk
        self._expert_us = expert_bytes / bytes_us
        self._dense_weight_us = (weight_bytes(model, dtype) / tp - expert_bytes) / bytes_us
        if expert_shards is not None and model.is_moe:  # experts over ep x moe_tp GPUs
            routed = model.expert_params * per_weight
            self._expert_us = routed / expert_shards / bytes_us
            self._dense_weight_us = (weight_bytes(model, dtype) - routed) / tp / bytes_us
        lm_head = model.vocab * model.hidden
        self._tok_flop_us = 2.0 * (model.active_params - lm_head) / tp / flops_us
        self._req_flop_us = 2.0 * lm_head / tp / flops_us
        self._attn_flop_us = head_flops / flops_us  # times (query x key) pairs
        self._kv_read_us = kv_tok / bytes_us  # per KV token read
        self._decode_per_kv = max(self._attn_flop_us, self._kv_read_us)
        self._fixed_us = 0.0 if physical else model.layers * LAYER_LAUNCH_US
        self._ar_fixed_us = 0.0
        self._ar_tok_us = 0.0
        if tp > 1:
            self._ar_fixed_us = 0.0 if physical else 2 * model.layers * ALLREDUCE_LATENCY_US
            link_us = gpu.nvlink_bytes_per_s * nvlink / 1e6
            self._ar_tok_us = 2 * model.layers * (2 * (tp - 1) / tp) * model.hidden * 2 / link_us
        self._per_n: dict[int, float] = {}

    @classmethod
    def from_config(cls, config: DeploymentConfig) -> RooflineStepTime:
        """Build from a deployment (model, GPU, TP, dtype and backend overhead)."""
        return cls(
            model_spec(config.model),
            gpu_spec(config.gpu),
            config.tp,
            config.dtype,
            framework_overhead(config),
            config.kv_dtype,
        )

    def _const_us(self, n_tokens: int, n_requests: int) -> float:
        """Linear layers, all-reduce, launches and framework overhead of one step."""
        weights = self._dense_weight_us
        if self._experts:
            weights += self._expert_us * min(1.0, n_tokens * self._topk / self._experts)
        compute = n_tokens * self._tok_flop_us + n_requests * self._req_flop_us
        comm = self._ar_fixed_us + n_tokens * self._ar_tok_us
        return max(compute, weights) + comm + self._fixed_us + self.overhead.us(n_requests)

    def _decode_const(self, n: int) -> float:
        const = self._per_n.get(n)
        if const is None:
            const = self._const_us(n, n)
            self._per_n[n] = const
        return const

    def decode_monotone(self, n: int) -> bool:
        """A decode step never gets shorter as the KV grows (its KV term is non-negative)."""
        return self._decode_per_kv >= 0.0

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        """Duration of one mixed step (see the protocol)."""
        if not prefill:
            if n_decode <= 0:
                return max(1, math.floor(self.overhead.us(0) + 0.5))
            total = float(decode_kv_tokens) * self._decode_per_kv + self._decode_const(n_decode)
            return max(1, math.floor(total + 0.5))
        tokens = n_decode
        attn = 0.0
        flop, read = self._attn_flop_us, self._kv_read_us
        for chunk, context in prefill:
            tokens += chunk
            # A chunk's attention: the larger of its FLOPs (query x key pairs, causal within
            # the chunk) and its KV reads; max(a, b) written out (as max picks it), no call.
            pairs = chunk * (context + chunk / 2)
            a, b = pairs * flop, (context + chunk) * read
            attn += b if b > a else a
        attn += float(decode_kv_tokens) * self._decode_per_kv if n_decode > 0 else 0.0
        total = self._const_us(tokens, len(prefill) + n_decode) + attn
        return max(1, math.floor(total + 0.5))

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        """Durations of ``n_steps`` decode-only steps (see the protocol)."""
        if n_decode <= 0:
            empty = max(1, math.floor(self.overhead.us(0) + 0.5))
            return np.full(n_steps, empty, dtype=np.int64)
        return self.decode_run_float(n_decode, decode_kv_tokens, n_steps).astype(np.int64)

    def decode_run_float(self, n_decode: int, decode_kv_tokens: int, n_steps: int) -> F64:
        """:meth:`decode_run_us` as float64, the same values (no int round trip).

        For callers that go on in floats (:class:`~dynosim.perf.overhead.CalibratedStepTime`).
        """
        if n_decode <= 0:
            return self.decode_run_us(n_decode, decode_kv_tokens, n_steps).astype(np.float64)
        # kv + i * n for each step i: exact (integers below 2**53), as the scalar path's
        kv = np.arange(decode_kv_tokens, decode_kv_tokens + n_decode * n_steps, n_decode,
                       dtype=np.float64)  # fmt: skip
        kv *= self._decode_per_kv
        kv += self._decode_const(n_decode)
        kv += 0.5
        np.floor(kv, out=kv)
        return np.maximum(kv, 1.0, out=kv)


def physical_floor(config: DeploymentConfig) -> RooflineStepTime:
    """The shortest a step of ``config`` can physically take (microseconds, no overhead).

    Each op at the GPU's peak (``max(FLOPs / peak FLOP/s, bytes / peak HBM bandwidth)``, the
    tensor-parallel all-reduces at NVLink's peak), from the GPU's data sheet (AIConfigurator's
    system files, :mod:`dynosim.perf.systems`): no kernel of any backend beats it. The routed
    experts are read from the ``ep x moe_tp`` GPUs that hold them (:mod:`dynosim.perf.memory`'s
    split), the share a step's tokens can touch, ``min(1, tokens x topk / experts)``: an upper
    bound of the expected share, so for mid-sized MoE batches this floor may sit a little above
    the true one. With attention DP the step is one DP rank's (its requests and KV); the other
    ranks' tokens, which also reach the experts, are left out (a lower floor).
    """
    moe = model_spec(config.model).is_moe
    shards = config.ep * config.moe_tp_size if moe else None
    return RooflineStepTime(model_spec(config.model), gpu_spec(config.gpu), config.tp,
                            config.dtype, NO_OVERHEAD, config.kv_dtype, physical=True,
                            expert_shards=shards)  # fmt: skip
