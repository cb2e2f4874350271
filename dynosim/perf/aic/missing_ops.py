"""Ops a model runs that AIConfigurator's op list for it lacks, priced from its measured ops.

* **MiniMax-M2's q/k RMSNorm over the whole projections** (``qk_norm_type: per_layer`` in its
  ``config.json``): the norm of q spans all query heads and that of k all KV heads, not one
  head each as in Qwen3. vLLM's ``MiniMaxText01RMSNormTP`` (``vllm/model_executor/layers/
  mamba/linear_attn.py``, used by ``models/minimax_m2.py``) computes each token's mean square
  over its rank's shard of q and of k, all-reduces the two per-token values across the tensor-
  parallel group (one ``[tokens, 2]`` FP32 all-reduce per layer, ``forward_qkv``), then
  normalises: two passes over the rank's q and k (variance, then apply) and, with tensor
  parallelism, one small all-reduce, in every layer. AIConfigurator's MiniMax op list has
  neither (embedding, norm, QKV GEMM, attention, projection, norm, router, MoE, LM head).
  Priced with the same model's measured ops: a pass as its ``add_norm`` (an RMSNorm over
  ``hidden`` values per token) at the token count that moves as many values, the all-reduce as
  its ``embedding_ar`` (``hidden`` BF16 values per token) at the token count that moves as many
  bytes (at least one: a small all-reduce costs its latency).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dynosim.perf.aic.key import AicKey
from dynosim.perf.catalog import model_spec

_VARIANCE_BYTES = 2 * 4  # q's and k's mean square of one token, FP32
_ACTIVATION_BYTES = 2  # the BF16 hidden state embedding_ar reduces


def qk_norm_ms(
    key: AicKey,
    evaluate: Callable[[list[int], int], list[Any]],
    names: list[str],
    indices: list[int],
) -> Callable[[int], float] | None:
    """Milliseconds the per-layer q/k norm adds to a step of ``T`` tokens, or None (no such norm).

    ``evaluate(indices, tokens)`` is AIConfigurator's evaluation of the phase's ops at
    ``indices`` for a step of ``tokens`` tokens, ``names`` their names without the phase prefix.
    """
    spec = model_spec(key.aic_model)
    if not spec.qk_norm_per_layer:
        return None
    found = dict(zip(names, indices, strict=True))
    norm, reduce = found.get("add_norm_1"), found.get("embedding_ar")
    if norm is None:
        return None
    width = (spec.heads + spec.kv_heads) * spec.head_dim / key.tp  # q and k values per token

    def op_ms(index: int, tokens: float) -> float:
        return float(evaluate([index], max(1, math.ceil(tokens)))[0][1])

    def step_ms(tokens: int) -> float:
        passes = 2.0 * op_ms(norm, tokens * width / spec.hidden)  # every layer's norm
        if key.tp == 1 or reduce is None:
            return passes
        per_token = _VARIANCE_BYTES / (_ACTIVATION_BYTES * spec.hidden)
        return passes + spec.layers * op_ms(reduce, tokens * per_token)  # one step's AR

    return step_ms
