"""AIConfigurator's compiled engine evaluated on log-spaced grids: the tables, in microseconds.

:func:`build_tables` compiles the model of an :class:`~dynosim.perf.aic.key.AicKey` and
evaluates it once per grid point (4 points per octave), a few seconds per key:

* ``nonattn_us[T]``: every op except attention and the LM head (GEMMs, norms, activations,
  embedding, TP all-reduce) for a step of ``T`` tokens;
* ``logits_us[R]``: the LM-head GEMM for ``R`` requests (one token each);
* ``prefill_us[c, p]``: context attention of one request computing ``c`` new tokens over
  ``p`` cached ones;
* ``decode_us[n, s]``: generation attention of ``n`` requests attending ``s`` KV tokens each
  (AIConfigurator's ``(batch=n, s)``);
* ``dec_nonattn_us[R]``: every generation op except attention and the LM head for a decode-only
  step of ``R`` requests, when the generation op list differs from the context one (else empty);
* ``moe_us[T]`` and ``dec_moe_us[R]``: the MoE ops among those (dispatch, experts, combine),
  with attention DP only (else empty): the part of a rank's step that depends on every rank's
  tokens (AIConfigurator prices it for ``T x attention_dp`` tokens, every rank as this one).

Tables are made monotone (running minimum from the far end of each axis: the lower monotone
envelope, :func:`_monotone`) so that interpolated step times are monotone in every input.
Ops the model runs that AIConfigurator's op list lacks are added (:mod:`.missing_ops`). Also
the cheap feasibility walk of a key's op lists (:func:`_walk`) and the proxy that times
unmeasured MoE splits as expert parallelism.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from dynosim.errors import ConfigError
from dynosim.perf.aic.fused_norms import with_fused_norms
from dynosim.perf.aic.key import (
    MXFP4_MXFP8,
    QUANT_MODES,
    AicKey,
    _query_version,
    _quiet,
    quant_modes,
)
from dynosim.perf.aic.missing_ops import qk_norm_ms
from dynosim.perf.aic.named import NamedOps
from dynosim.perf.aic.ops import LACKS_DATA, OpsFrom, borrowed_ops, op_names, probe_ops
from dynosim.perf.model_config import max_context

F64 = npt.NDArray[np.float64]
_PER_OCTAVE = 4
_MAX_TOKENS = 1 << 20  # grid end for step tokens, chunk and context lengths
_MAX_REQUESTS = 1 << 16  # grid end for requests per step
_KV_QUANT = {"bf16": "bfloat16", "fp8": "fp8"}
# Ops whose time depends on the context length (the rest depend on the step's tokens only).
_ATTENTION_OPS = ("_attention", "_mla_block", "_dsa_block", "_mla_module", "_dsa_module")


def _log_grid(hi: int, *, zero: bool = False) -> F64:
    """Integers 1..hi spaced ``_PER_OCTAVE`` per octave (plus 0 if ``zero``)."""
    steps = np.arange(round(math.log2(hi) * _PER_OCTAVE) + 1) / _PER_OCTAVE
    grid = np.unique(np.rint(np.exp2(steps)))
    return np.concatenate([[0.0], grid]) if zero else grid


def _monotone(table: F64) -> F64:
    """The lower monotone envelope: each point the least time of any point at or above it.

    A step with fewer tokens, requests or context than another can always run as that one
    (engines pad a batch to a captured CUDA-graph size; a shorter context is a masked longer
    one), so its time is at most the larger step's. And a measured kernel time errs upwards
    only: a timing can be delayed (clock ramp, a cold cache, another process), never run
    faster than the kernel can. AIConfigurator's tables have such isolated slow points (its
    vLLM 0.24 FP8 CUTLASS GEMM on B200, N = K = 8192: 19 us at 4 rows, 38 us at 16, 18 us at
    64), and the running maximum used before (format 4) carried each one to every larger step:
    Llama-3.1-70B FP8 on one B200 priced at 18.2 ms per decode step from 1 to 128 tokens where
    the table's own 8-token point is 14.5 ms.
    """
    for axis in range(table.ndim):
        flipped = np.flip(table, axis=axis)
        table = np.flip(np.minimum.accumulate(flipped, axis=axis), axis=axis)
    return table


@contextlib.contextmanager
def _database_mode(key: AicKey, mode: str) -> Iterator[None]:
    """AIConfigurator's perf database of ``key`` in query mode ``mode`` (SILICON | HYBRID).

    The compiled engine takes the mode from the (process-wide, cached) database when it is
    compiled; the database is put back in SILICON mode afterwards.
    """
    if mode == "SILICON":
        yield
        return
    from aiconfigurator_core.sdk import common, perf_database

    db = perf_database.get_database(key.gpu, key.backend, key.backend_version)
    if db is None:
        yield
        return
    db.set_default_database_mode(common.DatabaseMode[mode])
    try:
        yield
    finally:
        db.set_default_database_mode(common.DatabaseMode.SILICON)


def _compile(key: AicKey, mode: str = "SILICON") -> tuple[Any, str]:
    """AIConfigurator's compiled engine for ``key``, and why its MoE timing is a proxy ("").

    Block-FP8 experts whose TP shard is not a whole number of quantisation blocks (MiniMax-M2.5
    at moe_tp 8: 1536 / 8 = 192, blocks of 128) are outside AIConfigurator's data, though the
    engines run them; with ``database_mode: hybrid`` (and ``dtype: fp8``, the checkpoint's own
    format) their MoE is timed with AIConfigurator's per-tensor FP8 MoE kernels instead.
    """
    gemm, moe = quant_modes(key)
    if key.backend == "vllm" and (moe == MXFP4_MXFP8 or key.allreduce_fusion):
        return _with_trtllm_ops(key, mode, gemm, moe)
    try:
        return _compile_as(key, mode, gemm, moe), ""
    except ConfigError as err:
        if not (
            key.database_mode == "hybrid"
            and key.dtype == "fp8"
            and "weight_block_size" in str(err.allowed)
        ):
            raise
        reason = str(err.allowed).rsplit(": ", 1)[-1].removesuffix(")")
        return _compile_as(key, mode, gemm, "fp8"), f"{reason} MoE timed as per-tensor FP8"


def _with_trtllm_ops(key: AicKey, mode: str, gemm: str, moe: str | None) -> tuple[Any, str]:
    """The vLLM engine, its ops whose kernel is TensorRT-LLM's timed from TensorRT-LLM's tables.

    * MXFP4 experts on MXFP8 activations (``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``): vLLM runs
      them on Blackwell with FlashInfer's ``trtllm_fp4_block_scale_moe``
      (``SM100_FI_MXFP4_MXFP8_TRTLLM``), the TRT-LLM-gen kernel of TensorRT-LLM's TRTLLM MoE
      backend; AIConfigurator's vLLM tables hold only the default BF16-activation variant.
    * The fused all-reduce (``allreduce_fusion``: the compilation pass ``fuse_allreduce_rms``,
      formerly ``enable_fi_allreduce_fusion``): FlashInfer's ``trtllm_allreduce_fusion``, the
      one-/two-shot all-reduce of TensorRT-LLM fused with the residual add and RMSNorm that
      follow, replaces vLLM's custom all-reduce (AIConfigurator's: 2.1 ms a TP-8 Llama-3.1-70B
      B200 decode step of 16 requests, TensorRT-LLM's 0.6 ms). Taken: the all-reduce of each
      layer and of the embedding, and a pure-TP MoE's (no EP, no attention DP).

    Measurements of the kernels that run, so not marked as estimates; where TensorRT-LLM's
    tables cannot build the model, the all-reduce stays vLLM's and the note says so.
    """
    mxfp8 = moe == MXFP4_MXFP8
    own = _compile_as(key, mode, gemm, QUANT_MODES[key.dtype][1] if mxfp8 else moe)
    trt = dataclasses.replace(
        key, backend="trtllm", backend_version=_query_version(key.gpu, "trtllm")
    )
    tp_moe = key.ep == 1 and key.attention_dp == 1
    comm: tuple[str, ...] = ("_ar_1", "_ar_2", "_embedding_ar")
    comm += ("_moe_pre_dispatch", "_moe_post_dispatch") if tp_moe else ()

    def take(name: str) -> bool:
        return (mxfp8 and name.endswith("_moe")) or (key.allreduce_fusion and name.endswith(comm))

    try:
        theirs = _compile_as(trt, mode, *quant_modes(trt))
        with _quiet():
            return borrowed_ops(own, theirs, take), ""
    except ConfigError as err:
        if mxfp8:
            raise
        reason = str(err.allowed).removeprefix("roofline (").removesuffix(")")[:300]
        return own, f"all-reduce timed as vLLM's custom all-reduce, not the fused one ({reason})"


def _compile_as(key: AicKey, mode: str, gemm: str, moe: str | None) -> Any:
    with _quiet(), _database_mode(key, mode):
        from aiconfigurator_core.sdk.engine import EngineHandle

        parallel: dict[str, Any] = {}
        if key.ep > 1 or key.moe_tp > 1 or key.attention_dp > 1:
            parallel = {
                "attention_dp_size": key.attention_dp,
                "moe_tp_size": key.moe_tp,
                "moe_ep_size": key.ep,
            }
        if moe is not None:
            parallel["moe_quant_mode"] = moe
        try:
            return EngineHandle.compile(
                key.aic_model,
                key.gpu,
                key.backend,
                backend_version=key.backend_version,
                tp_size=key.tp,
                gemm_quant_mode=gemm,
                kvcache_quant_mode=_KV_QUANT[key.kv_dtype],
                fmha_quant_mode="bfloat16",
                **parallel,
            )
        except Exception as err:
            reason = " ".join(str(err).split())[:700]
            raise ConfigError(
                "timing",
                "aic",
                f"roofline (AIConfigurator cannot model {key.aic_model} on {key.gpu} with "
                f"{key.backend} {key.backend_version}, tp={key.tp} ep={key.ep} "
                f"moe_tp={key.moe_tp} attention_dp={key.attention_dp}, {key.dtype}: {reason})",
            ) from None


def _op_indices(
    evaluate: Callable[[list[int]], list[Any]],
) -> tuple[list[int], list[int], int]:
    """Positions of (other ops, the attention ops, the LM head or -1) in an op list.

    Attention ops are those whose time depends on the context (softmax attention, MLA and
    DSA blocks); a model may have several (gpt-oss: full and sliding-window layers).
    """
    other: list[int] = []
    attn: list[int] = []
    logits = -1
    for i, op in enumerate(probe_ops(evaluate)):
        name = str(op[0])
        if name.endswith(_ATTENTION_OPS):
            attn.append(i)
        elif "logits" in name:
            logits = i
        else:
            other.append(i)
    if not attn:
        raise ConfigError("timing", "aic", "roofline (unexpected AIConfigurator op list)")
    return other, attn, logits


def _walk(key: AicKey, mode: str) -> None:
    h, _ = _compile(key, mode)
    with _quiet():
        _op_indices(lambda idx: h.evaluate_context_ops(idx, batch_size=1, s=16))
        _, _, logits = _op_indices(lambda idx: h.evaluate_generation_ops(idx, batch_size=1, s=16))
    if logits < 0:
        raise ConfigError("timing", "aic", "roofline (AIConfigurator op list has no LM head)")


def _estimable(key: AicKey, err: ConfigError) -> bool:
    """Whether ``err`` is missing measurements that HYBRID mode may estimate for ``key``."""
    return key.database_mode == "hybrid" and LACKS_DATA in str(err.allowed)


def build_tables(key: AicKey, mode: str = "SILICON") -> tuple[dict[str, F64], str]:
    """Evaluate AIConfigurator on the grids (a few seconds); values in microseconds.

    Returns the tables and why any of them is a proxy (see :func:`_compile`; "" if none).

    ``mode`` is AIConfigurator's database query mode: SILICON (measured data only; a missing
    point is a ConfigError) or HYBRID (measured where it has data, else its speed-of-light
    time times an empirical factor).
    """
    h, note = _compile(key, mode)
    h = with_fused_norms(key, h)
    if mode == "HYBRID" and key.moe_tp > 1:
        h, proxy = _moe_as_expert_parallel(key, h)
        note = "; ".join(n for n in (note, proxy) if n)
    try:
        return _evaluate_grids(key, NamedOps(h, key)), note
    except ConfigError:
        raise
    except Exception as err:  # a grid point AIConfigurator has no data for
        reason = " ".join(str(err).split())[:700]
        raise ConfigError("timing", "aic", f"roofline ({LACKS_DATA}: {reason})") from None


def _moe_as_expert_parallel(key: AicKey, h: Any) -> tuple[Any, str]:
    """``h`` with its unmeasured routed-expert op timed as expert parallelism on the same GPUs.

    AIConfigurator measures some MoE kernels only unsplit (gpt-oss on TensorRT-LLM: every
    ``moe_tp = 1``, ``ep`` up to 128). Splitting each expert over ``m`` GPUs (``moe_tp = m``)
    or placing ``1/m`` of the experts on each (``ep = m``) puts the same expert bytes and, on
    average, the same expert FLOPs on every GPU, so the measured ``moe_tp = 1, ep = m x ep``
    kernel is a closer proxy than a speed-of-light estimate (gpt-oss on B200 TRT-LLM, the rows
    so estimated: TPOT MAPE 70% with HYBRID's estimate, 16% with this one). Only the
    routed-expert op is taken from the proxy; dispatch, attention and the rest stay the
    deployment's own. Returns ``h`` unchanged and "" when there is no such op or the proxy has
    no measurements either.
    """
    proxy_key = dataclasses.replace(key, moe_tp=1, ep=key.ep * key.moe_tp)
    try:
        proxy, _ = _compile(proxy_key, "SILICON")
    except ConfigError:
        return h, ""
    moe: dict[str, set[int]] = {}
    with _quiet():
        for phase in ("context", "generation"):
            evaluate = functools.partial(getattr(h, f"evaluate_{phase}_ops"), batch_size=1, s=16)
            other = getattr(proxy, f"evaluate_{phase}_ops")
            moe[phase] = set()
            for i, mine in enumerate(probe_ops(evaluate)):
                if not (str(mine[0]).endswith("_moe") and mine[3] != "silicon"):
                    continue
                try:
                    theirs = other([i], batch_size=1, s=16)[0]
                except Exception:
                    return h, ""
                if theirs[0] != mine[0] or theirs[3] != "silicon":
                    return h, ""
                moe[phase].add(i)
    if not (moe["context"] or moe["generation"]):
        return h, ""
    note = (
        f"routed experts timed as AIConfigurator's measured moe_tp=1 ep={proxy_key.ep} "
        f"kernels (the same expert bytes per GPU as moe_tp={key.moe_tp} ep={key.ep})"
    )
    moved = {phase: {i: i for i in moe[phase]} for phase in moe}
    return OpsFrom(h, proxy, moved), note


def _evaluate_grids(key: AicKey, h: Any) -> dict[str, F64]:
    with _quiet():
        # The LM head is priced from the generation op list: MoE context lists omit it.
        ctx_ops, ctx_attn, _ = _op_indices(
            lambda idx: h.evaluate_context_ops(idx, batch_size=1, s=16)
        )
        gen_ops, gen_attn, logits = _op_indices(
            lambda idx: h.evaluate_generation_ops(idx, batch_size=1, s=16)
        )
        ctx_names = _op_names(h, "context", ctx_ops)
        gen_names = _op_names(h, "generation", gen_ops)
        same_ops = ctx_names == gen_names
        if logits < 0:
            raise ConfigError("timing", "aic", "roofline (AIConfigurator op list has no LM head)")

        def ms(values: list[Any]) -> float:
            return float(sum(v[1] for v in values))

        def ctx_ops_at(idx: list[int], t: int) -> list[Any]:
            return list(h.evaluate_context_ops(idx, batch_size=1, s=t, x=t))

        def gen_ops_at(idx: list[int], r: int) -> list[Any]:
            return list(h.evaluate_generation_ops(idx, batch_size=r, s=1))

        # An op the model runs that AIConfigurator's list lacks (missing_ops), else nothing.
        ctx_extra = qk_norm_ms(key, ctx_ops_at, ctx_names, ctx_ops)
        gen_extra = qk_norm_ms(key, gen_ops_at, gen_names, gen_ops)

        def extra(add: Callable[[int], float] | None, t: int) -> float:
            return 0.0 if add is None else add(t)

        tok = _log_grid(_MAX_TOKENS)
        nonattn = [ms(ctx_ops_at(ctx_ops, int(t))) + extra(ctx_extra, int(t)) for t in tok]
        req = _log_grid(_MAX_REQUESTS)
        logit = [ms(gen_ops_at([logits], int(r))) for r in req]
        dec_nonattn = (
            []
            if same_ops
            else [ms(gen_ops_at(gen_ops, int(r))) + extra(gen_extra, int(r)) for r in req]
        )
        moe_ctx = [i for i, n in zip(ctx_ops, ctx_names, strict=True) if "moe" in n]
        moe_gen = [i for i, n in zip(gen_ops, gen_names, strict=True) if "moe" in n]
        moe, dec_moe = [], []
        if key.attention_dp > 1 and moe_ctx:
            moe = [ms(ctx_ops_at(moe_ctx, int(t))) for t in tok]
            dec_moe = [] if same_ops else [ms(gen_ops_at(moe_gen, int(r))) for r in req]
        chunk = _log_grid(_MAX_TOKENS)
        ctx = _log_grid(_MAX_TOKENS, zero=True)
        prefill = [
            [
                ms(h.evaluate_context_ops(ctx_attn, batch_size=1, s=int(c), prefix=int(p)))
                for p in ctx
            ]
            for c in chunk
        ]
        dec_n = _log_grid(_MAX_REQUESTS)
        # Decode attention is tabled by (batch, context per request): AIConfigurator's own
        # coordinates, where its data is a uniform batch of n requests at length s each. Tabled
        # by total KV instead, the monotone envelope along the batch axis carried the cost of a
        # single request of n*s tokens (a long-context kernel AIConfigurator measures as poorly
        # parallel, or extrapolates past its data) to every batch of n requests at s: Qwen3.5's
        # 32 x 8k decode attention on B200 priced at 26x AIConfigurator's own 2.5 ms.
        # A request cannot attend more than the model's context: the grid ends there and
        # beyond it the last segment extrapolates (AIConfigurator extrapolates wildly there).
        dec_s = _log_grid(min(max_context(key.aic_model) or _MAX_TOKENS, _MAX_TOKENS))
        decode = [
            [ms(h.evaluate_generation_ops(gen_attn, batch_size=int(n), s=int(s))) for s in dec_s]
            for n in dec_n
        ]
    to_us = 1000.0
    return {
        "tok_grid": tok,
        "nonattn_us": _monotone(np.asarray(nonattn) * to_us),
        "req_grid": req,
        "logits_us": _monotone(np.asarray(logit) * to_us),
        "chunk_grid": chunk,
        "ctx_grid": ctx,
        "prefill_us": _monotone(np.asarray(prefill) * to_us),
        "dec_n_grid": dec_n,
        "dec_s_grid": dec_s,
        "decode_us": _monotone(np.asarray(decode) * to_us),
        "dec_nonattn_us": _monotone(np.asarray(dec_nonattn, dtype=np.float64) * to_us),
        "moe_us": _monotone(np.asarray(moe, dtype=np.float64) * to_us),
        "dec_moe_us": _monotone(np.asarray(dec_moe, dtype=np.float64) * to_us),
    }


def _op_names(h: Any, phase: str, indices: list[int]) -> list[str]:
    """Names of ``h``'s ``phase`` ops at ``indices``, in that order, without the phase prefix."""
    names = op_names(h, phase)
    return [names[i].removeprefix(f"{phase}_") for i in indices]
