"""Step times from NVIDIA AIConfigurator's measured kernel database (``aiconfigurator-core``).

Querying AIConfigurator costs 1-300 us per call, far too slow per simulated step, so
:func:`aic_tables` evaluates the compiled model once on log-spaced grids (4 points per octave)
and :class:`AicStepTime` interpolates them with linear arithmetic only:

* ``nonattn_us[T]``: every op except attention and the LM head (GEMMs, norms, activations,
  embedding, TP all-reduce) for a step of ``T`` tokens;
* ``logits_us[R]``: the LM-head GEMM for ``R`` requests (one token each);
* ``prefill_us[c, p]``: context attention of one request computing ``c`` new tokens over
  ``p`` cached ones. A step's prefill attention is ``F + sum_i (prefill_us[c_i, p_i] - F)`` with
  ``F = prefill_us[1, 0]``, the kernel-launch floor paid once per step (this tracks
  AIConfigurator's batched attention within ~20%, where summing per request overcounts ~3x);
* ``decode_us[n, K]``: generation attention of ``n`` requests attending ``K`` KV tokens in all,
  i.e. AIConfigurator's ``(batch=n, s=K/n)``;
* ``dec_nonattn_us[R]``: every generation op except attention and the LM head for a decode-only
  step of ``R`` requests, for models whose generation op list differs from the context one
  (MoE with overlapped dispatch, Gated DeltaNet recurrence: a decode step is not a one-request
  prefill of ``R`` tokens there); empty when the lists match (dense models), and decode-only
  steps then use ``nonattn_us`` as before.

Tables are made monotone (running maximum along each axis) so that interpolated step times
are monotone in every input. Values beyond a grid's end extrapolate its last segment linearly.
AIConfigurator reports kernel time only; the backend's framework overhead is added per step.

Tables are cached in memory and on disk as ``<cache>/aic/<key>.npz`` where ``<cache>`` is
``$DYNOSIM_CACHE_DIR`` or ``~/.cache/dynosim``; the key includes the aiconfigurator-core and
table-format versions, so stale files are never read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import json
import logging
import math
import os
import re
import warnings
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from dynosim.config import AicDatabaseMode, DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf.catalog import gpu_spec, model_spec
from dynosim.perf.model_config import max_context
from dynosim.perf.overhead import FrameworkOverhead, framework_overhead

F64 = npt.NDArray[np.float64]
TABLE_FORMAT = 3  # 2: parallelism, quantisation, every attention op; 3: context cap
_PER_OCTAVE = 4
_MAX_TOKENS = 1 << 20  # grid end for step tokens, chunk and context lengths
_MAX_REQUESTS = 1 << 16  # grid end for requests per step
_MAX_DECODE_KV = 1 << 27  # grid end for total KV tokens of a decode batch
_SCALAR_RUN = 20  # decode runs up to this many steps are priced in Python floats (faster)
_ESTIMATE_FORMAT = 2  # how estimated tables were made: 1 HYBRID; 2 MoE from expert parallelism
_TABLE_NAMES = (
    "tok_grid",
    "nonattn_us",
    "req_grid",
    "logits_us",
    "chunk_grid",
    "ctx_grid",
    "prefill_us",
    "dec_n_grid",
    "dec_k_grid",
    "decode_us",
    "dec_nonattn_us",
)


@functools.cache
def aic_version() -> str:
    """Installed aiconfigurator-core version."""
    return importlib.metadata.version("aiconfigurator-core")


def cache_dir() -> Path:
    """Directory of the on-disk table cache (``$DYNOSIM_CACHE_DIR/aic`` if the variable is set)."""
    root = os.environ.get("DYNOSIM_CACHE_DIR") or str(Path.home() / ".cache" / "dynosim")
    return Path(root) / "aic"


# dtype -> (AIConfigurator GEMM quant mode, MoE quant mode). None leaves the MoE mode to
# AIConfigurator, which infers it from the checkpoint's quantization_config (as dynosim always
# did for bf16 and fp8). mxfp4 is gpt-oss's native format: BF16 GEMMs, MXFP4 experts; int4_wo
# is Kimi-K2.5's: BF16 GEMMs, INT4 weight-only experts.
QUANT_MODES: dict[str, tuple[str, str | None]] = {
    "bf16": ("bfloat16", None),
    "fp8": ("fp8", None),
    "fp8_block": ("fp8_block", "fp8_block"),
    "nvfp4": ("nvfp4", "nvfp4"),
    "mxfp4": ("bfloat16", "w4a16_mxfp4"),
    "int4_wo": ("bfloat16", "int4_wo"),
}
# TensorRT-LLM runs MXFP4 experts with MXFP8 activations on Blackwell (its default TRTLLM MoE
# backend) and with BF16 activations on Hopper (TRITON): the "MoE Backend Support Matrix" of
# TensorRT-LLM's "Deployment Guide for GPT-OSS on TensorRT-LLM - Blackwell Hardware".
_MXFP4_MXFP8 = "w4a8_mxfp4_mxfp8"
_KV_QUANT = {"bf16": "bfloat16", "fp8": "fp8"}
# Ops whose time depends on the context length (the rest depend on the step's tokens only).
_ATTENTION_OPS = ("_attention", "_mla_block", "_dsa_block", "_mla_module", "_dsa_module")


@dataclass(frozen=True, slots=True)
class AicKey:
    """What a set of tables depends on (per DP rank when ``attention_dp > 1``)."""

    aic_model: str
    gpu: str
    backend: str
    backend_version: str
    tp: int
    dtype: str
    ep: int = 1
    moe_tp: int = 1
    attention_dp: int = 1
    kv_dtype: str = "bf16"
    database_mode: AicDatabaseMode = "hybrid"

    def filename(self) -> str:
        """Cache file name (model ids have their slash replaced).

        The database mode is not part of it: the tables are the measured ones whenever
        AIConfigurator has every point, and the file records whether any were estimated.
        """
        model = self.aic_model.replace("/", "--")
        par = f"_ep{self.ep}_mtp{self.moe_tp}_adp{self.attention_dp}_kv{self.kv_dtype}"
        if (moe := quant_modes(self)[1]) != QUANT_MODES[self.dtype][1]:
            par += f"_moe-{moe}"  # a backend- and GPU-specific MoE format of the dtype
        return (
            f"{model}_{self.gpu}_{self.backend}-{self.backend_version}_tp{self.tp}_{self.dtype}"
            f"{par}_aic{aic_version()}_f{TABLE_FORMAT}.npz"
        )


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence aiconfigurator's warnings and log noise while it loads and extrapolates."""
    logger = logging.getLogger("aiconfigurator_core")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _log_grid(hi: int, *, zero: bool = False) -> F64:
    """Integers 1..hi spaced ``_PER_OCTAVE`` per octave (plus 0 if ``zero``)."""
    steps = np.arange(round(math.log2(hi) * _PER_OCTAVE) + 1) / _PER_OCTAVE
    grid = np.unique(np.rint(np.exp2(steps)))
    return np.concatenate([[0.0], grid]) if zero else grid


def _monotone(table: F64) -> F64:
    """Running maximum along every axis."""
    for axis in range(table.ndim):
        table = np.maximum.accumulate(table, axis=axis)
    return table


def resolve_key(config: DeploymentConfig) -> AicKey:
    """The table key of ``config``, or ConfigError if AIConfigurator cannot time it."""
    model = model_spec(config.model)
    gpu_spec(config.gpu).flops(config.dtype)
    if model.aic_name is None:
        raise ConfigError(
            "timing", "aic", f"roofline (AIConfigurator has no data for model {config.model})"
        )
    version = _query_version(config.gpu, config.backend)
    return AicKey(
        model.aic_name,
        config.gpu,
        config.backend,
        version,
        config.tp,
        config.dtype,
        ep=config.ep,
        moe_tp=config.moe_tp_size if model.is_moe else 1,
        attention_dp=config.attention_dp,
        kv_dtype=config.kv_dtype,
        database_mode=config.aic_database_mode,
    )


@functools.lru_cache(maxsize=64)
def _query_version(gpu: str, backend: str) -> str:
    """AIConfigurator's current data version for ``backend`` on ``gpu``.

    Resolving it reads a few dozen YAML files of the package (~0.5 s), so the answers are kept
    in ``<cache>/aic/query_versions_aic<version>.json``: they depend only on the installed
    package.

    Raises:
        ConfigError: AIConfigurator has no data for this backend on this GPU.
    """
    path = cache_dir() / f"query_versions_aic{aic_version()}.json"
    name = f"{gpu}/{backend}"
    known: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            known = loaded
    if isinstance(known.get(name), str):
        return str(known[name])
    with _quiet():
        from aiconfigurator_core.sdk import perf_database

        try:
            version = str(perf_database.resolve_query_version(gpu, backend, "current"))
        except Exception as err:
            raise ConfigError(
                "timing", "aic", f"roofline (AIConfigurator has no {backend} data for {gpu}: {err})"
            ) from None
    known[name] = version
    with contextlib.suppress(OSError):  # a read-only cache is not an error
        _write_atomic(path, lambda f: f.write(json.dumps(known, indent=1).encode()))
    return version


def quant_modes(key: AicKey) -> tuple[str, str | None]:
    """AIConfigurator's (GEMM, MoE) quant modes for ``key``'s dtype on its backend and GPU."""
    gemm, moe = QUANT_MODES[key.dtype]
    if key.dtype == "mxfp4" and key.backend == "trtllm" and gpu_spec(key.gpu).fp4_flops:
        return gemm, _MXFP4_MXFP8  # Blackwell: the only GPUs with FP4 tensor cores
    return gemm, moe


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
            reason = " ".join(str(err).split())[:300]
            raise ConfigError(
                "timing",
                "aic",
                f"roofline (AIConfigurator cannot model {key.aic_model} on {key.gpu} with "
                f"{key.backend} {key.backend_version}, tp={key.tp} ep={key.ep} "
                f"moe_tp={key.moe_tp} attention_dp={key.attention_dp}, {key.dtype}: {reason})",
            ) from None


def _probe_ops(evaluate: Callable[[list[int]], list[Any]]) -> list[Any]:
    """Every op of an op list, one at a time: ``(name, ms, ..., source)`` of each.

    Raises:
        ConfigError: AIConfigurator lacks data for one of the ops.
    """
    ops: list[Any] = []
    for i in range(256):
        try:
            ops.append(evaluate([i])[0])
        except Exception as err:
            if "out of range" in str(err):
                break  # the end of the op list
            reason = " ".join(str(err).split())[:300]
            raise ConfigError("timing", "aic", f"roofline ({_LACKS_DATA}: {reason})") from None
    return ops


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
    for i, op in enumerate(_probe_ops(evaluate)):
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


@functools.lru_cache(maxsize=256)
def check_key(key: AicKey) -> None:
    """Compile ``key`` and walk its op lists once (a second, no tables): cheap feasibility.

    With ``database_mode: hybrid`` an op AIConfigurator has no measurements for is checked
    again in its HYBRID mode (estimated), so only what cannot be estimated either is refused.

    Raises:
        ConfigError: AIConfigurator cannot build the engine or lacks data for one of its ops.
    """
    path = cache_dir() / key.filename()
    if path.exists():
        if key.database_mode == "silicon":
            aic_tables(key)  # refuses estimated tables
        return
    try:
        _walk(key, "SILICON")
    except ConfigError as err:
        if not _estimable(key, err):
            raise
        _walk(key, "HYBRID")


def _walk(key: AicKey, mode: str) -> None:
    h, _ = _compile(key, mode)
    with _quiet():
        _op_indices(lambda idx: h.evaluate_context_ops(idx, batch_size=1, s=16))
        _, _, logits = _op_indices(lambda idx: h.evaluate_generation_ops(idx, batch_size=1, s=16))
    if logits < 0:
        raise ConfigError("timing", "aic", "roofline (AIConfigurator op list has no LM head)")


def _estimable(key: AicKey, err: ConfigError) -> bool:
    """Whether ``err`` is missing measurements that HYBRID mode may estimate for ``key``."""
    return key.database_mode == "hybrid" and _LACKS_DATA in str(err.allowed)


_LACKS_DATA = "AIConfigurator lacks data"


def build_tables(key: AicKey, mode: str = "SILICON") -> tuple[dict[str, F64], str]:
    """Evaluate AIConfigurator on the grids (a few seconds); values in microseconds.

    Returns the tables and why any of them is a proxy (see :func:`_compile`; "" if none).

    ``mode`` is AIConfigurator's database query mode: SILICON (measured data only; a missing
    point is a ConfigError) or HYBRID (measured where it has data, else its speed-of-light
    time times an empirical factor).
    """
    h, note = _compile(key, mode)
    if mode == "HYBRID" and key.moe_tp > 1:
        h, proxy = _moe_as_expert_parallel(key, h)
        note = "; ".join(n for n in (note, proxy) if n)
    try:
        return _evaluate_grids(key, h), note
    except ConfigError:
        raise
    except Exception as err:  # a grid point AIConfigurator has no data for
        reason = " ".join(str(err).split())[:300]
        raise ConfigError("timing", "aic", f"roofline ({_LACKS_DATA}: {reason})") from None


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
            for i, mine in enumerate(_probe_ops(evaluate)):
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
    return _MoeFrom(h, proxy, moe["context"], moe["generation"]), note


class _MoeFrom:
    """An engine handle whose ops at some indices are evaluated by another handle.

    The results are the own handle's ops, then the proxy's (not in ``idx`` order): the callers
    sum their times or ask for one op at a time.
    """

    def __init__(self, own: Any, proxy: Any, context: set[int], generation: set[int]) -> None:
        self._own, self._proxy = own, proxy
        self._moved = {"context": context, "generation": generation}

    def evaluate_context_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The context ops at ``idx`` (AIConfigurator's ``evaluate_context_ops``)."""
        return self._split("context", idx, kw)

    def evaluate_generation_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The generation ops at ``idx`` (AIConfigurator's ``evaluate_generation_ops``)."""
        return self._split("generation", idx, kw)

    def _split(self, phase: str, idx: list[int], kw: dict[str, Any]) -> list[Any]:
        moved = self._moved[phase]
        name = f"evaluate_{phase}_ops"
        mine = [i for i in idx if i not in moved]
        theirs = [i for i in idx if i in moved]
        # Callers sum the times (AIConfigurator may return one entry for ops of one name).
        own = getattr(self._own, name)(mine, **kw) if mine else []
        return [*own, *(getattr(self._proxy, name)(theirs, **kw) if theirs else [])]


def _evaluate_grids(key: AicKey, h: Any) -> dict[str, F64]:
    with _quiet():
        # The LM head is priced from the generation op list: MoE context lists omit it.
        ctx_ops, ctx_attn, _ = _op_indices(
            lambda idx: h.evaluate_context_ops(idx, batch_size=1, s=16)
        )
        gen_ops, gen_attn, logits = _op_indices(
            lambda idx: h.evaluate_generation_ops(idx, batch_size=1, s=16)
        )
        same_ops = _op_names(h.evaluate_context_ops, ctx_ops) == _op_names(
            h.evaluate_generation_ops, gen_ops
        )
        if logits < 0:
            raise ConfigError("timing", "aic", "roofline (AIConfigurator op list has no LM head)")

        def ms(values: list[Any]) -> float:
            return float(sum(v[1] for v in values))

        tok = _log_grid(_MAX_TOKENS)
        nonattn = [
            ms(h.evaluate_context_ops(ctx_ops, batch_size=1, s=int(t), x=int(t))) for t in tok
        ]
        req = _log_grid(_MAX_REQUESTS)
        logit = [ms(h.evaluate_generation_ops([logits], batch_size=int(r), s=1)) for r in req]
        dec_nonattn = (
            []
            if same_ops
            else [ms(h.evaluate_generation_ops(gen_ops, batch_size=int(r), s=1)) for r in req]
        )
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
        dec_k = _log_grid(_MAX_DECODE_KV)
        # A request cannot attend more than the model's context: cells with fewer, longer
        # requests are priced at that length (AIConfigurator extrapolates wildly beyond its
        # data there, and the monotone envelope would carry such a value to every larger batch).
        # Dense models keep their uncapped tables (their results stay as validated before).
        spec = model_spec(key.aic_model)
        plain = not (spec.is_moe or spec.is_mla or spec.linear_layers or spec.sliding_layers)
        cap = _MAX_TOKENS if plain else max_context(key.aic_model) or _MAX_TOKENS
        decode = [
            [
                ms(
                    h.evaluate_generation_ops(
                        gen_attn, batch_size=int(n), s=min(cap, max(1, round(k / n)))
                    )
                )
                for k in dec_k
            ]
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
        "dec_k_grid": dec_k,
        "decode_us": _monotone(np.asarray(decode) * to_us),
        "dec_nonattn_us": _monotone(np.asarray(dec_nonattn, dtype=np.float64) * to_us),
    }


def _op_names(evaluate: Callable[..., list[Any]], indices: list[int]) -> list[str]:
    """Names of the ops at ``indices`` without their phase prefix."""
    names = [str(v[0]) for v in evaluate(indices, batch_size=1, s=16)]
    return [n.removeprefix("context_").removeprefix("generation_") for n in names]


def _write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file through ``write`` so that readers see the old or the new file, whole."""
    import tempfile  # only when writing: keeps start-up light

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def aic_tables(key: AicKey) -> dict[str, F64]:
    """The tables of ``key`` (:func:`load_tables` without the estimate note)."""
    return load_tables(key)[0]


@functools.lru_cache(maxsize=64)
def load_tables(key: AicKey) -> tuple[dict[str, F64], str]:
    """Tables for ``key``: from memory, else from the disk cache, else built (and cached).

    Returns them and why some of them are AIConfigurator estimates, not measurements ("" if
    none: HYBRID mode, a proxy kernel). A key AIConfigurator cannot build is remembered (in
    memory): asking again raises the same ConfigError at once instead of re-evaluating the grid
    up to the missing point.

    Raises:
        ConfigError: AIConfigurator cannot build the engine or lacks data on the grid (and,
            with ``database_mode: silicon``, when the tables on disk were estimated).
    """
    path = cache_dir() / key.filename()
    tables: dict[str, F64] | None = None
    note = ""
    try:
        with np.load(path, allow_pickle=False) as data:
            tables = {name: np.asarray(data[name], dtype=np.float64) for name in _TABLE_NAMES}
            note = str(data["estimated"]) if "estimated" in data.files else ""
            if note and int(data["estimate_format"]) != _ESTIMATE_FORMAT:
                tables = None  # estimated by an older rule: rebuild
    except (OSError, KeyError, ValueError):
        tables = None  # missing or unreadable: rebuild
    if tables is None:
        built = _build_or_error(key)
        if isinstance(built, ConfigError):
            raise ConfigError(built.field, built.value, built.allowed)
        tables, note = built
        marks = {"estimated": np.array(note), "estimate_format": np.array(_ESTIMATE_FORMAT)}
        saved = {**tables, **marks}
        with contextlib.suppress(OSError):  # a read-only cache is not an error
            _write_atomic(path, lambda f: np.savez(f, **saved))  # type: ignore[arg-type]
    if note and key.database_mode == "silicon":
        raise ConfigError("timing", "aic", f"roofline ({_LACKS_DATA}: {note})")
    return tables, note


class EstimatedTimingWarning(UserWarning):
    """Some step times of a deployment are AIConfigurator's estimates, not measurements."""

    def __init__(self, key: AicKey, note: str) -> None:
        """Say which key and which missing data (``note``, AIConfigurator's words)."""
        shape = f"tp={key.tp} ep={key.ep} moe_tp={key.moe_tp} attention_dp={key.attention_dp}"
        super().__init__(
            f"{key.aic_model} on {key.gpu} with {key.backend} ({shape}, {key.dtype}): step "
            f"times partly estimated, not measured: {note} (aic_database_mode: hybrid; "
            "'silicon' refuses instead)"
        )


@functools.lru_cache(maxsize=16)
def _build_or_error(key: AicKey) -> tuple[dict[str, F64], str] | ConfigError:
    """The tables of ``key`` and why any were estimated, or the error that refuses it.

    Measured data first; where AIConfigurator lacks a point and ``key`` allows it, the whole
    set again in HYBRID mode (its ops with data stay measured).
    """
    try:
        return build_tables(key)
    except ConfigError as err:
        if not _estimable(key, err):
            return err
        missing = str(err.allowed).removeprefix(f"roofline ({_LACKS_DATA}: ").removesuffix(")")
        missing = re.sub(r" at /\S+", "", missing)  # the data file AIConfigurator looked in
        missing = f"no measurements ({missing}): estimated by AIConfigurator's HYBRID mode"
    try:
        tables, note = build_tables(key, "HYBRID")
    except ConfigError as err:
        return err
    return tables, "; ".join(n for n in (note, missing) if n)


def _seg(grid: Sequence[float], x: float) -> tuple[int, float]:
    """Segment index and (possibly > 1, extrapolating) weight of ``x`` on ``grid``."""
    i = bisect_right(grid, x) - 1
    i = min(max(i, 0), len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def _lerp(grid: Sequence[float], vals: Sequence[float], x: float) -> float:
    i, w = _seg(grid, x)
    return vals[i] + w * (vals[i + 1] - vals[i])


class AicStepTime:
    """:class:`~dynosim.perf.protocol.StepTimeModel` interpolating AIConfigurator tables."""

    def __init__(self, tables: dict[str, F64], overhead: FrameworkOverhead) -> None:
        """Wrap precomputed ``tables`` (see :func:`build_tables`) and a framework overhead."""
        self.overhead = overhead
        t = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in tables.items()}
        self._tok: list[float] = t["tok_grid"].tolist()
        self._nonattn: list[float] = t["nonattn_us"].tolist()
        self._req: list[float] = t["req_grid"].tolist()
        self._logits: list[float] = t["logits_us"].tolist()
        self._chunk: list[float] = t["chunk_grid"].tolist()
        self._ctx: list[float] = t["ctx_grid"].tolist()
        self._prefill: list[list[float]] = t["prefill_us"].tolist()
        self._floor: float = self._prefill[0][0]
        self._dn: list[float] = t["dec_n_grid"].tolist()
        # Python floats: the scalar and the vectorised decode paths apply the same IEEE-754
        # operations in the same order, hence give the same bits (no transcendentals, no FMA).
        kg, dec = t["dec_k_grid"], t["decode_us"]
        self._kg_l: list[float] = kg.tolist()
        self._kw_l: list[float] = np.diff(kg).tolist()
        self._dec_l: list[list[float]] = dec.tolist()
        self._ddec_l: list[list[float]] = np.diff(dec, axis=1).tolist()
        self._dec_nonattn: list[float] = t["dec_nonattn_us"].tolist()
        self._per_n: dict[int, tuple[int, float, float]] = {}
        self._per_r: dict[int, tuple[float, float]] = {}

    @classmethod
    def from_config(cls, config: DeploymentConfig) -> AicStepTime:
        """Build (or load cached) tables for ``config``.

        Raises:
            ConfigError: AIConfigurator lacks the model, GPU, backend or dtype.

        Warns:
            EstimatedTimingWarning: AIConfigurator had no measurements for some ops at this
                shape, and they are its estimates (``aic_database_mode: hybrid``).
        """
        key = resolve_key(config)
        tables, note = load_tables(key)
        if note:
            warnings.warn(EstimatedTimingWarning(key, note), stacklevel=2)
        return cls(tables, framework_overhead(config))

    def _const_us(self, n_tokens: int, n_requests: int) -> float:
        """Attention-free part of a step: other ops, LM head and framework overhead."""
        per_request = self._per_r.get(n_requests)
        if per_request is None:
            logits = _lerp(self._req, self._logits, float(n_requests))
            per_request = (logits, self.overhead.us(n_requests))
            self._per_r[n_requests] = per_request
        return _lerp(self._tok, self._nonattn, float(n_tokens)) + per_request[0] + per_request[1]

    def _prefill_attn_us(self, chunk: int, context: int) -> float:
        grid, x = self._chunk, float(max(chunk, 1))
        i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
        wc = (x - grid[i]) / (grid[i + 1] - grid[i])
        grid, x = self._ctx, float(max(context, 0))
        j = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
        wp = (x - grid[j]) / (grid[j + 1] - grid[j])
        r0, r1 = self._prefill[i], self._prefill[i + 1]
        a = r0[j] + wp * (r0[j + 1] - r0[j])
        b = r1[j] + wp * (r1[j + 1] - r1[j])
        return a + wc * (b - a)

    def _decode_row(self, n: int) -> tuple[int, float, float]:
        """Row index and weight on the batch grid, and the attention-free time, for ``n``."""
        row = self._per_n.get(n)
        if row is None:
            i, wn = _seg(self._dn, float(n))
            if self._dec_nonattn:  # the generation op list differs from the context one
                self._const_us(n, n)  # caches the LM head and overhead of n requests
                logits, overhead = self._per_r[n]
                const = _lerp(self._req, self._dec_nonattn, float(n)) + logits + overhead
            else:
                const = self._const_us(n, n)
            row = (i, wn, const)
            self._per_n[n] = row
        return row

    def _kv_cell(self, kv: float) -> int:
        """Segment of the KV grid that prices a total KV length of ``kv``."""
        j = bisect_right(self._kg_l, kv) - 1
        top = len(self._kg_l) - 2
        return (j if j < top else top) if j > 0 else 0

    def _decode_cell_us(self, n: int, j: int, kv: npt.NDArray[np.int64]) -> F64:
        """Decode step times (before rounding) of ``n`` requests for KV lengths in cell ``j``.

        The same IEEE-754 operations, in the same order, as :meth:`_decode_attn_scalar_us`
        plus the attention-free time, element by element (scalars broadcast, no FMA).
        """
        i, wn, const = self._decode_row(n)
        wk = (kv - self._kg_l[j]) / self._kw_l[j]
        a = self._dec_l[i][j] + wk * self._ddec_l[i][j]
        b = self._dec_l[i + 1][j] + wk * self._ddec_l[i + 1][j]
        out: F64 = a + wn * (b - a) + const
        return out

    def _decode_run_scalar_us(self, n: int, kv: range) -> list[int]:
        """Rounded decode step times for the KV lengths ``kv`` (increasing), in Python floats.

        Element by element the operations of :meth:`step_us` for a decode-only step.
        """
        if not kv:
            return []
        i, wn, const = self._decode_row(n)
        kg, kw = self._kg_l, self._kw_l
        a0, da, b0, db = self._dec_l[i], self._ddec_l[i], self._dec_l[i + 1], self._ddec_l[i + 1]
        top = len(kg) - 2
        j = self._kv_cell(float(kv[0]))
        nxt = kg[j + 1] if j < top else math.inf
        out: list[int] = []
        for x in kv:
            while x >= nxt:
                j += 1
                nxt = kg[j + 1] if j < top else math.inf
            wk = (float(x) - kg[j]) / kw[j]
            a = a0[j] + wk * da[j]
            b = b0[j] + wk * db[j]
            d = math.floor(a + wn * (b - a) + const + 0.5)
            out.append(d if d > 1 else 1)
        return out

    def _decode_attn_scalar_us(self, n: int, kv: float) -> float:
        """Decode attention of ``n`` requests attending ``kv`` KV tokens in all."""
        i, wn, _ = self._decode_row(n)
        j = self._kv_cell(kv)
        wk = (kv - self._kg_l[j]) / self._kw_l[j]
        a = self._dec_l[i][j] + wk * self._ddec_l[i][j]
        b = self._dec_l[i + 1][j] + wk * self._ddec_l[i + 1][j]
        return a + wn * (b - a)

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        """Duration of one mixed step (see the protocol)."""
        if not prefill:
            if n_decode <= 0:
                return max(1, math.floor(self.overhead.us(0) + 0.5))
            # Same operations, in the same order, as decode_run_us (checked bit for bit by the
            # conformance suite); Python floats are ~5x faster than numpy on one element.
            const = self._decode_row(n_decode)[2]
            total = self._decode_attn_scalar_us(n_decode, float(decode_kv_tokens)) + const
            return max(1, math.floor(total + 0.5))
        tokens = n_decode
        attn = self._floor
        for chunk, context in prefill:
            tokens += chunk
            attn += self._prefill_attn_us(chunk, context) - self._floor
        if n_decode > 0:
            attn += self._decode_attn_scalar_us(n_decode, float(decode_kv_tokens))
        total = self._const_us(max(tokens, 1), len(prefill) + n_decode) + attn
        return max(1, math.floor(total + 0.5))

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        """Durations of ``n_steps`` decode-only steps (see the protocol)."""
        if n_decode <= 0:
            empty = max(1, math.floor(self.overhead.us(0) + 0.5))
            return np.full(n_steps, empty, dtype=np.int64)
        kv = range(decode_kv_tokens, decode_kv_tokens + n_decode * n_steps, n_decode)
        if n_steps <= _SCALAR_RUN:
            return np.array(self._decode_run_scalar_us(n_decode, kv), dtype=np.int64)
        kv_all = np.arange(kv.start, kv.stop, kv.step, dtype=np.int64)
        # Piecewise over the cells of the KV grid the run crosses (usually one or two).
        j, last = self._kv_cell(float(kv[0])), self._kv_cell(float(kv[-1]))
        if j == last:
            total = self._decode_cell_us(n_decode, j, kv_all)
        else:
            total = np.empty(n_steps)
            start = 0
            for cell in range(j, last + 1):
                stop = n_steps if cell == last else bisect_left(kv, self._kg_l[cell + 1])
                total[start:stop] = self._decode_cell_us(n_decode, cell, kv_all[start:stop])
                start = stop
        # Truncation is floor for x >= 0, and both give 1 after the clamp for x < 0.
        out = (total + 0.5).astype(np.int64)
        np.maximum(out, 1, out=out)
        return out
