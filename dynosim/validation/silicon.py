"""AIConfigurator's real-GPU measurements (``silicon_sample.csv``): their rows, parsed.

Each row of that file is a benchmark of one aggregated deployment at a fixed input/output
length and a fixed batch size per scheduler: ``c = batch_size x attention_dp`` clients each send
their next request as soon as the previous one completes (with attention data parallelism every
DP rank schedules its own batch of ``batch_size``), or of a disaggregated one (its prefill and
decode pools: :func:`parse_disagg_pools`). :func:`closed_loop_requests` makes such a
benchmark's requests; :func:`dynosim.validation.validate.replay` runs it in the simulator. Only
some rows may be used for calibration (see ``CALIBRATION_GROUPS``); the others are for
validation.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dynosim.errors import ConfigError
from dynosim.perf.catalog import model_spec
from dynosim.types import Request

CALIBRATION_GROUPS = (
    # The calibration set of issue 19 (aggregated rows only; every other row is held out): one
    # group or more per backend and GPU generation. The first five were calibrated on before
    # (the project's first three, and the two MoE groups issue 8 named); issue 19 adds the six
    # after them, for vLLM (which had no fitted section) and for Blackwell.
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "trtllm"),
    ("Qwen/Qwen3-32B", "h100_sxm", "trtllm"),
    ("Qwen/Qwen3-32B", "h100_sxm", "sglang"),
    ("Qwen/Qwen3-235B-A22B-FP8", "h100_sxm", "trtllm"),
    ("openai/gpt-oss-120b", "b200_sxm", "trtllm"),
    ("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", "vllm"),
    ("openai/gpt-oss-120b", "h100_sxm", "vllm"),
    ("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "vllm"),
    ("meta-llama/Llama-3.1-70B", "b200_sxm", "vllm"),
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", "sglang"),
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "trtllm"),
)
# precision + gemm_quant_mode -> dtype, as the row says (an fp8 row's MoE mode is inferred by
# AIConfigurator from the checkpoint); fp4 rows of an MXFP4 checkpoint (gpt-oss) are mxfp4.
_DTYPES = {
    "": "bf16",
    "bf16": "bf16",
    "fp8fp8": "fp8",
    "fp8fp8_block": "fp8_block",
    "fp4nvfp4": "nvfp4",
    "int4int4_wo": "int4_wo",  # Kimi-K2.5: INT4 weight-only experts
}


def silicon_csv() -> Path:
    """Where the installed aiconfigurator-core keeps its silicon measurements."""
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"


@dataclass(frozen=True, slots=True, kw_only=True)
class SiliconRow:
    """One real-GPU measurement of an aggregated deployment."""

    model: str
    gpu: str
    backend: str
    dtype: str
    tp: int
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    ep: int = 1
    moe_tp: int | None = None
    attention_dp: int = 1

    @property
    def batch_size(self) -> int:
        """Requests each scheduler (DP rank) batches: ``concurrency / attention_dp``."""
        return self.concurrency // self.attention_dp


@dataclass(frozen=True, slots=True)
class RefusedRow:
    """A row the simulator cannot build, and why (one line)."""

    model: str
    gpu: str
    backend: str
    reason: str


def _dtype(model: str, quant: str) -> str:
    """The dtype of a row, or ConfigError for a quantisation dynosim has no dtype for."""
    if quant not in _DTYPES:
        raise ConfigError("dtype", quant, "bf16 | fp8 | fp8_block | nvfp4 rows")
    dtype = _DTYPES[quant]
    if dtype == "nvfp4" and model_spec(model).sliding_layers:
        return "mxfp4"  # gpt-oss ships MXFP4 experts; "nvfp4" rows on Hopper are that format
    return dtype


def _num(value: str, default: int) -> int:
    return int(value) if value not in ("", "0") else default


def _source_concurrency(source: str) -> int | None:
    """The ``silicon_concurrency=N`` a row's source records, if any."""
    found = re.search(r"silicon_concurrency=(\d+)", source)
    return int(found.group(1)) if found else None


def _is_inferencex_dump(source: str) -> bool:
    """Whether a row comes from an InferenceX database dump (see :func:`_inferencex_shape`).

    Those are the ``db-dump/...`` and ``source_file=2026-04-06.csv`` rows, whose converter
    wrote InferenceX's ``tp``/``ep`` into AIConfigurator's columns in its own way.
    """
    return source.startswith("db-dump/") or source.startswith("source_file=2026-04-06.csv")


def _inferencex_shape(
    r: dict[str, str], tp: int, adp: int, moe_tp: int | None, ep: int
) -> tuple[int, int, int | None, int]:
    """``(tp, attention_dp, moe_tp, ep)`` of an InferenceX-dump MoE row, on the GPUs it ran on.

    InferenceX runs a single-node point on ``TP`` GPUs (its runner allocates
    ``--gres=gpu:$TP``; its search space names ``{tp: 4, ep: 4, dp-attn: true}`` "tp=4 with
    expert parallelism=4 and data-parallel attention", SemiAnalysisAI/InferenceX
    ``.github/configs/nvidia-master.yaml`` and its AGENTS guide). The dump's converter recorded
    such a point (the 2026-04-06 rows name it in their id, ``..._tp4_ep4_N``) as
    ``moe_tp = TP``, ``moe_ep = EP`` with ``tp_size = TP x EP`` (SGLang and TRT-LLM without
    attention DP), ``tp_size = 1``, ``attention_dp_size = TP x EP`` (TRT-LLM with attention
    DP), or ``tp_size = attention_dp_size = TP``, ``moe_ep = TP x TP`` (vLLM with attention
    DP): read by AIConfigurator's own rule (``ModelConfig``: ``tp_size x pp_size x
    attention_dp_size`` GPUs, ``tp_size x attention_dp_size = moe_tp_size x moe_ep_size``)
    that is ``EP`` or ``TP`` times the GPUs the point ran on. On those ``TP`` GPUs: without
    attention DP, attention is ``TP``-way tensor parallel and each expert ``TP / EP``-way
    (SGLang ``--ep-size``, TRT-LLM ``moe_expert_parallel_size``: expert TP = TP / EP); with
    it, ``TP`` DP ranks of attention TP 1, the experts split the same way (vLLM's
    ``--enable-expert-parallel`` makes EP = DP x TP = ``TP``). With ``EP = 1`` the dump's
    columns already say this and nothing changes.
    """
    gpus = tp * adp
    if r["backend"] == "vllm":
        if adp > 1 and ep == gpus and tp == adp:  # tp_size = attention_dp = TP, ep = TP x TP
            return 1, tp, 1, tp
        return tp, adp, moe_tp, ep
    width, experts = moe_tp or 1, ep
    if experts > 1 and width > 1 and width * experts == gpus and width % experts == 0:
        if adp > 1:  # attention DP: TP ranks of attention TP 1
            return 1, width, width // experts, experts
        return width, 1, width // experts, experts
    return tp, adp, moe_tp, ep


def parse_row(r: dict[str, str]) -> SiliconRow:
    """One aggregated row of ``silicon_sample.csv``.

    Raises:
        ConfigError: unknown model, a quantisation without a dtype, pipeline parallelism.
    """
    if int(r["pp_size"] or 1) != 1:
        raise ConfigError("pp_size", r["pp_size"], "1 (no pipeline parallelism)")
    model = r["model_path"]
    spec = model_spec(model)
    dtype = _dtype(model, r["precision"] + r["gemm_quant_mode"])
    adp = _num(r["attention_dp_size"], 1)
    tp = int(r["tp_size"])
    clients = int(r["batch_size"]) * adp
    ep = moe_tp = None
    if spec.is_moe:  # a dense model's MoE columns are placeholders (0, 1 or empty)
        ep = _num(r["moe_ep_size"], 1)
        moe_tp = _num(r["moe_tp_size"], 0) or None
        wide = (moe_tp or 0) * ep
        if not r["attention_dp_size"] and wide > tp and wide % tp == 0:
            # No attention-DP column, MoE over more GPUs than attention: vLLM's data parallelism
            # (--data-parallel-size without expert parallelism shards the experts over the
            # DP x TP ranks), i.e. attention_dp = (moe_tp x ep) / tp. Only such rows (Qwen3-235B,
            # vLLM 0.12 on H200) have no column, and their batch_size is the clients recorded.
            adp = wide // tp
            clients = _source_concurrency(r["silicon_data_source"]) or int(r["batch_size"])
    if spec.is_moe and _is_inferencex_dump(r["silicon_data_source"]):
        tp, adp, moe_tp, ep = _inferencex_shape(r, tp, adp, moe_tp, ep or 1)
        clients = _source_concurrency(r["silicon_data_source"]) or clients
    return SiliconRow(
        model=model,
        gpu=r["system"],
        backend=r["backend"],
        dtype=dtype,
        tp=tp,
        concurrency=clients,
        isl=int(r["isl"]),
        osl=int(r["osl"]),
        ttft_ms=float(r["silicon_ttft_ms"]),
        tpot_ms=float(r["silicon_tpot_ms"]),
        ep=ep or 1,
        moe_tp=moe_tp,
        attention_dp=adp,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolShape:
    """One pool of a disaggregated row: ``workers`` engines, their parallelism and batch."""

    workers: int
    tp: int
    batch_size: int  # requests each of the pool's schedulers (DP ranks) batches
    ep: int = 1
    moe_tp: int | None = None
    attention_dp: int = 1


def parse_disagg_pools(r: dict[str, str]) -> tuple[str, PoolShape, PoolShape]:
    """The dtype, prefill pool and decode pool of one disaggregated row.

    The clients of the row are ``decode batch_size x workers x attention_dp`` (on every row
    that records both, the source's ``silicon_concurrency`` equals it).

    Raises:
        ConfigError: unknown model, a quantisation without a dtype, pipeline parallelism, or a
            row that records no worker counts (most disaggregated rows: the deployment they
            ran is not determined).
    """
    model = r["model_path"]
    spec = model_spec(model)
    dtype = _dtype(model, r["precision"] + r["gemm_quant_mode"])

    def count(key: str, default: int | None) -> int:
        """A whole-number column (``default`` when blank or 0; None: it must be recorded)."""
        raw = (r.get(key) or "").strip()
        if not raw and default is None:
            raise ConfigError(key, "", "a number (the row does not record it)")
        try:
            value = int(float(raw or 0))
        except ValueError:
            raise ConfigError(key, raw, "a whole number") from None
        if value < 0:
            raise ConfigError(key, raw, "a whole number >= 0")
        return value or (default if default is not None else value)

    def pool(side: str) -> PoolShape:
        if count(f"{side}_pp_size", 1) != 1:
            raise ConfigError(
                f"{side}_pp_size", r[f"{side}_pp_size"], "1 (no pipeline parallelism)"
            )
        shape = [count(f"{side}_{key}", None) for key in ("num_workers", "tp_size", "batch_size")]
        workers, tp, batch = shape
        return PoolShape(
            workers=workers,
            tp=tp,
            batch_size=max(1, batch),
            ep=count(f"{side}_moe_ep_size", 1) if spec.is_moe else 1,
            moe_tp=(count(f"{side}_moe_tp_size", 0) or None) if spec.is_moe else None,
            attention_dp=count(f"{side}_attention_dp_size", 1),
        )

    return dtype, pool("prefill"), pool("decode")


def agg_rows(path: Path | None = None) -> Iterator[SiliconRow | RefusedRow]:
    """Every aggregated row, parsed or refused with its reason, in file order."""
    with (path or silicon_csv()).open(newline="") as f:
        for r in csv.DictReader(f):
            if r["mode"] != "agg":
                continue
            try:
                yield parse_row(r)
            except ConfigError as err:
                yield RefusedRow(r["model_path"], r["system"], r["backend"], str(err))


def load_rows(model: str, gpu: str, backend: str, path: Path | None = None) -> list[SiliconRow]:
    """Aggregated-mode rows of one (model, GPU, backend) group that parse (see :func:`agg_rows`)."""
    rows = []
    with (path or silicon_csv()).open(newline="") as f:
        for r in csv.DictReader(f):
            if (r["model_path"], r["system"], r["backend"], r["mode"]) != (
                model,
                gpu,
                backend,
                "agg",
            ):
                continue
            try:
                rows.append(parse_row(r))
            except ConfigError:
                continue
    return rows


def closed_loop_requests(concurrency: int, n: int, isl: int, osl: int) -> list[Request]:
    """``n`` fixed-length requests from ``concurrency`` clients that all start at time 0."""
    return [
        Request(
            id=i,
            arrival_s=0.0,
            input_tokens=isl,
            output_tokens=osl,
            after_id=i - concurrency if i >= concurrency else None,
        )
        for i in range(n)
    ]


def row_kv_dtype(backend: str, dtype: str) -> str | None:
    """The KV cache dtype a row ran with, when not its dtype's default (None).

    vLLM's and SGLang's ``--kv-cache-dtype`` default to ``auto``, the model's activation dtype
    (bf16), and the rows do not say otherwise; TRT-LLM rows keep the dtype's KV default (fp8
    for fp8).
    """
    return "bf16" if backend in ("vllm", "sglang") and dtype != "bf16" else None
