"""The engine flags each InferenceX row of ``silicon_sample.csv`` ran with, from its recipe.

SemiAnalysis InferenceX launches every benchmark point with a shell recipe
(``benchmarks/single_node/fixed_seq_len/<model>_<precision>_<gpu>[_trt].sh`` today,
``benchmarks/<model>_<precision>_<gpu>_{docker,slurm}.sh`` before), and the recipes changed
over the months the rows were measured: MiniMax-M2.5 on B200 ran vLLM with
``--gpu-memory-utilization 0.95``, block size 32 and a bf16 KV cache until 2026-04-03, with
0.90, ``--kv-cache-dtype fp8`` and ``--max-num-batched-tokens 2*ISL`` after; the Llama-3.1-70B
recipes (removed 2025-10-29) passed ``max-num-batched-tokens: 8192`` and an fp8 KV cache; the
DeepSeek-R1 SGLang recipes an ``fp8_e4m3`` KV cache and ``--mem-fraction-static 0.82``.

``data/inferencex_recipes.csv`` holds, for 2,219 aggregated single-node InferenceX rows (by
their ``id``, of the 2,701 that record a ``measured`` date), the flags of the recipe in effect
on that date, resolved for the row's ISL, OSL, concurrency, TP, EP and DP attention (the recipes
branch on them), the recipe's ``path@commit`` in InferenceX's history and the benchmark's
concurrency (``conc``: the source's ``silicon_concurrency``; AIConfigurator's ``batch_size``
column is sometimes that over the DP size). It was made by running each recipe at its commit
under bash with the server and client commands stubbed to print their arguments and the config
files the recipe wrote; an empty cell is a flag the recipe leaves at the engine's default.
For TensorRT-LLM rows (session 21) ``enable_attention_dp`` and ``moe_backend`` are the values the
recipe wrote into its ``extra_llm_api_options`` file, resolved the same way (empty where the
recipe writes none: the dense 70B recipes): 118 rows of 2025-11-02 (``*_trt_slurm.sh`` at
9596d23d7) record the sweep's ``ep 1`` and no attention DP, but their recipes ran
``--ep_size=$TP`` (and, at some points, attention DP); ``moe_backend`` is recorded, not used
(AIConfigurator times one kernel per MoE format and GPU).
``attention_dp_enable_balance``, ``attention_dp_timeout_iters`` and
``attention_dp_batching_wait_iters`` (session 22) are the recipe's ``attention_dp_config`` where it
writes one with attention DP on, resolved the same way: 75 rows (the ``*_trt_slurm.sh`` recipes
of 2025-11-02 and their successors: ``enable_balance: true``, ``timeout_iters: 60``,
``batching_wait_iters: 0``) and 12 gpt-oss rows (``enable_balance: true`` alone: TensorRT-LLM's
defaults, 50 and 10).
``moe_activation`` is ``mxfp8`` where the recipe exports
``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (read from the recipe's text at its commit). A row ran
a speculative-decoding recipe (``..._mtp.sh``: 174 rows, DeepSeek-R1 TRT-LLM and SGLang, Qwen3.5
SGLang) where the sweep config of that recipe explains it and the plain one does not: its
container image (DeepSeek-R1 FP8 B200 TRT-LLM on 2026-02-05: ``1.2.0rc6.post3``, which only
``dsr1-fp8-b200-trt-mtp`` used) or its point of the sweep; AIConfigurator's row ids do not
record it. Not in it: rows whose point lies outside that day's sweep or that ran from a
pull-request branch, rows that both a plain and a speculative recipe explain (their recipe is
not known), GB200 rows of the multi-node pipeline, disaggregated rows, and rows of NVIDIA's own
campaigns (their ``measured`` date notwithstanding).

The last 101 entries (session 20) are MiniMax-M2.5 B200 vLLM rows the day's sweep did not
explain but whose own record names their recipe: the 53 NVFP4 rows of 2026-04-03 record the
image ``vllm/vllm-openai:nightly-5b8c30d6...``, which only the branch commit 08bcde8f1 ("Use
vLLM nightly image ... for MiniMax-M2.5 NVFP4 B200") ran for that sweep, with
``minimaxm2.5_fp4_b200.sh`` at that commit (``--gpu-memory-utilization 0.95 --block-size=32
--kv-cache-dtype fp8``, no ``--max-num-batched-tokens``); the 44 FP8 rows of 2026-04-03
record ``v0.19.0-cu130``, and every commit naming that image for ``minimaxm2.5-fp8-b200-vllm``
(bddbf4031 and the branch commits of that day) passes bddbf4031's flags; the 4 NVFP4 TP 1
8k/1k rows of workflow run 802 share ``config_id`` 701 with that run's 1k/1k TP 1 rows, whose
recipe is ``minimaxm2.5_fp4_b200.sh@13962fcfa`` (resolved here for 8k/1k). Two rows of run
802 whose DP-attention branch the record does not decide stay without.

A row whose own recipe is not known replays :func:`dynosim.validation.validate.recipe_engine`'s
typical flags and the KV-cache dtype every recipe of its family passes, where they all pass the
same (:func:`family_kv_cache_dtype`).

:func:`recipe_flags` gives a row's flags as :class:`~dynosim.config.EngineConfig` fields, its
KV-cache dtype and, for vLLM, the parallelism the command line asked for;
:func:`dynosim.validation.measurements.read_measurements` puts them on the row (they replace the
generic recipe of :func:`dynosim.validation.validate.recipe_engine`).
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dynosim.perf.catalog import fp8_scales

__all__ = [
    "RECIPES_CSV",
    "SERVED_CHECKPOINTS",
    "RowRecipe",
    "family_kv_cache_dtype",
    "recipe_flags",
    "served_fp8_scales",
]

RECIPES_CSV = Path(__file__).with_name("data") / "inferencex_recipes.csv"

_KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "auto": None, "": None}
"""The recipes' ``--kv-cache-dtype`` / ``kv_cache_config.dtype`` spellings -> the config's
(None: the engine's default, the model's activation dtype for vLLM and SGLang)."""

ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm": {"max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9, "block_size": 16,
             "enable_prefix_caching": True},
    "trtllm": {"max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9,
               "enable_prefix_caching": True},
    "sglang": {"enable_prefix_caching": True},
}  # fmt: skip
"""What an engine runs with where its recipe passes nothing: vLLM's API server on GPUs of 70 GiB
or more (``EngineArgs._set_default_args``: ``max_num_batched_tokens`` 8192), its
``--gpu-memory-utilization`` 0.9, CUDA block size 16 and prefix caching on (V1); TRT-LLM's
``max_num_tokens`` 8192, ``free_gpu_memory_fraction`` 0.9 and ``enable_block_reuse`` true
(``tensorrt_llm/llmapi/llm_args.py``); SGLang's radix cache on. SGLang sizes its chunk and
memory fraction from the GPU's memory (``ServerArgs``): those stay the replay's."""


SERVED_CHECKPOINTS: dict[tuple[str, str], str] = {
    ("meta-llama/Llama-3.1-70B", "fp8"): "nvidia/Llama-3.3-70B-Instruct-FP8",
}
"""``(model_path, dtype)`` of an InferenceX row -> the checkpoint its server loaded, where
AIConfigurator's row names the base model: every NVIDIA FP8 run of the 70B sweep (vLLM and
TensorRT-LLM, ``.github/workflows/70b-tmpl.yml`` at each of its commits, later the master
configs) served NVIDIA's ModelOpt export, whose activation scales are static."""


def served_fp8_scales(model: str, dtype: str) -> str | None:
    """An InferenceX row's ``fp8_scales`` when its served checkpoint decides them (else None)."""
    served = SERVED_CHECKPOINTS.get((model, dtype))
    return None if served is None else fp8_scales(served)


@dataclass(frozen=True, slots=True)
class RowRecipe:
    """What one row's recipe sets.

    Attributes:
        engine: :class:`~dynosim.config.EngineConfig` fields (the engine's defaults where the
            recipe passes nothing, :data:`ENGINE_DEFAULTS`).
        kv_cache_dtype: ``fp8`` when the recipe asks for it (None: the default).
        concurrency: The benchmark's concurrency.
        speculative: The deployment's ``speculative`` section when the recipe speculates
            (``mtp:N``: multi-token prediction with ``N`` draft tokens, at the MTP default
            acceptance of :class:`~dynosim.config.SpeculativeConfig`).
        parallel: ``tp``, ``ep``, ``moe_tp``, ``attention_dp`` as the command line asks.
            vLLM: ``--tensor-parallel-size``, ``--data-parallel-size``,
            ``--enable-expert-parallel`` (InferenceX's vLLM recipes for MiniMax-M2.5 and
            Kimi-K2.5 ignore the sweep's DP-attention setting, which AIConfigurator's rows
            encode as ``attention_dp``). TensorRT-LLM: ``--tp_size``, ``--ep_size`` and
            ``enable_attention_dp`` (:func:`_trtllm_parallel`). None for SGLang, whose
            recipes pass the sweep's settings.
        moe_activation: ``mxfp8`` when the recipe runs MXFP4 experts on MXFP8 activations
            (``export VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``: every gpt-oss B200 vLLM recipe);
            None: the backend's default.
        source: The recipe, ``path@commit`` in InferenceX's history.
        row: The row the recipe was resolved for: ``model_path``, ``system``, ``backend``,
            ``precision``, ``isl``, ``osl`` as ``silicon_sample.csv`` spells them
            (:meth:`fits` checks a row against it).
    """

    engine: dict[str, Any] = field(default_factory=dict)
    kv_cache_dtype: str | None = None
    concurrency: int = 0
    speculative: dict[str, Any] | None = None
    parallel: dict[str, int] | None = None
    moe_activation: str | None = None
    source: str = ""
    row: tuple[str, ...] = ()

    def fits(self, r: dict[str, str]) -> bool:
        """Whether the CSV row ``r`` is the one this recipe was resolved for.

        A file that reuses an id for another point (an edited copy of the sample) keeps the
        generic recipe rather than this one's concurrency, parallelism and flags.
        """
        return self.row == tuple((r.get(k) or "").strip() for k in _ROW_FIELDS)


_ROW_FIELDS = ("model_path", "system", "backend", "precision", "isl", "osl")
"""The ``silicon_sample.csv`` columns a recipe's row is identified by, besides its id."""


def recipe_flags(r: dict[str, str]) -> RowRecipe | None:
    """The recipe of the ``silicon_sample.csv`` row ``r`` (None: none known).

    None also when the table's row of that id is another point (:meth:`RowRecipe.fits`).
    """
    recipe = _table().get(r.get("id") or "")
    return recipe if recipe is not None and recipe.fits(r) else None


def family_kv_cache_dtype(r: dict[str, str]) -> str | None:
    """The KV-cache dtype of an InferenceX row whose own recipe is not known (None: the default).

    The row ran one of its family's recipes (same ``model_path``, ``system``, ``backend``,
    ``precision``): where every recipe of that family in the table passes the same
    ``--kv-cache-dtype`` (``kv_cache_config.dtype``), the row's did too. Every DeepSeek-R1
    SGLang recipe on B200, for one, passes ``--kv-cache-dtype fp8_e4m3``, at every commit the
    table holds (``dsr1_fp4_b200_docker.sh`` of 2025-11 to ``dsr1_fp8_b200.sh`` of 2026-03).
    None where the family's recipes differ, leave it at the default, or are not known.
    """
    return _family_kv().get(_family(r))


_FAMILY_FIELDS = _ROW_FIELDS[:4]
"""``model_path``, ``system``, ``backend``, ``precision``: the recipe family of a row."""

_BALANCE_FIELDS = (
    "attention_dp_enable_balance",
    "attention_dp_timeout_iters",
    "attention_dp_batching_wait_iters",
)


def family_attention_dp_config(r: dict[str, str]) -> dict[str, Any]:
    """The ``attention_dp_config`` of a TensorRT-LLM attention-DP row whose recipe is unknown.

    As :func:`family_kv_cache_dtype`: where every recipe of the row's family that turns
    attention DP on writes the same ``attention_dp_config``, the row's did too (every
    DeepSeek-R1 TensorRT-LLM recipe with attention DP in the table writes ``enable_balance:
    true, timeout_iters: 60, batching_wait_iters: 0``). Empty where they differ or none is known.
    """
    return dict(_family_balance().get(_family(r), ()))


def _family(r: dict[str, str]) -> tuple[str, ...]:
    return tuple((r.get(k) or "").strip() for k in _FAMILY_FIELDS)


_T = TypeVar("_T")


def _agreed(
    value: Callable[[RowRecipe], _T | None],
    among: Callable[[RowRecipe], bool] = lambda recipe: True,
) -> dict[tuple[str, ...], _T]:
    """Per recipe family, the value every recipe of it (``among`` them) has, where it is set."""
    seen: dict[tuple[str, ...], set[_T | None]] = {}
    for recipe in _table().values():
        if among(recipe):
            seen.setdefault(recipe.row[:4], set()).add(value(recipe))
    return {family: v for family, vs in seen.items() if len(vs) == 1 and (v := next(iter(vs)))}


@functools.lru_cache(maxsize=1)
def _family_kv() -> dict[tuple[str, ...], str]:
    return _agreed(lambda recipe: recipe.kv_cache_dtype)


@functools.lru_cache(maxsize=1)
def _family_balance() -> dict[tuple[str, ...], tuple[tuple[str, Any], ...]]:
    return _agreed(
        lambda recipe: tuple((k, recipe.engine[k]) for k in _BALANCE_FIELDS if k in recipe.engine),
        among=lambda recipe: recipe.parallel is not None and recipe.parallel["attention_dp"] > 1,
    )


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, RowRecipe]:
    with RECIPES_CSV.open(newline="", encoding="utf-8") as f:
        return {r["id"]: _recipe(r) for r in csv.DictReader(f)}


def _trtllm_parallel(r: dict[str, str]) -> dict[str, int] | None:
    """What ``trtllm-serve --tp_size=TP --ep_size=EP`` with ``enable_attention_dp`` runs.

    Attention is split TP ways, or with ``enable_attention_dp`` replicated on each of the TP
    ranks, each with its own batch (AIConfigurator's ``tp 1 x attention_dp TP``); the experts
    are split ``EP`` ways and each over ``TP / EP`` ranks (TensorRT-LLM's ``moe_tp_size``
    default, ``Mapping``). None where the table does not resolve both flags (the row's own
    parallelism stands). Some recipes set them from the point's concurrency and lengths,
    whatever the sweep's row says: ``dsr1_fp8_b200_trt_slurm.sh@9596d23d7`` passes
    ``EP_SIZE="$TP"`` at every point, ``dsr1_fp4_b200_trt_slurm.sh`` there turns expert
    parallelism and attention DP on above concurrency 32 at TP 4.
    """
    ep, dp = r["enable_expert_parallel"], r["enable_attention_dp"]
    if not ep.startswith("ep_size=") or dp not in ("true", "false"):
        return None
    tp, ep_size = int(r["tp"]), int(ep.removeprefix("ep_size="))
    attention_dp = tp if dp == "true" else 1
    return {"tp": tp // attention_dp, "ep": ep_size, "moe_tp": tp // ep_size,
            "attention_dp": attention_dp}  # fmt: skip


def _recipe(r: dict[str, str]) -> RowRecipe:
    backend = r["backend"]
    engine: dict[str, Any] = dict(ENGINE_DEFAULTS[backend])

    def put(name: str, column: str, kind: type[int] | type[float]) -> None:
        if raw := r[column].strip():
            engine[name] = kind(float(raw))

    put("max_num_batched_tokens", "max_num_batched_tokens", int)
    put("gpu_memory_utilization", "mem_fraction", float)
    put("max_num_seqs", "max_num_seqs", int)
    if r["prefix_caching"] == "false":
        engine["enable_prefix_caching"] = False
    parallel = None
    if backend == "vllm":
        put("block_size", "block_size", int)
        if r["async_scheduling"] in ("true", "false"):
            engine["async_scheduling"] = r["async_scheduling"] == "true"
        if r["allreduce_fusion"] == "true":
            engine["allreduce_fusion"] = True
        tp, dp = int(r["tp"]), int(r["dp_size"] or 1)
        ep = tp * dp if r["enable_expert_parallel"] == "true" else 1
        parallel = {"tp": tp, "ep": ep, "moe_tp": tp * dp // ep, "attention_dp": dp}
    elif backend == "trtllm":
        put("batch_wait_timeout_iters", "batch_wait_timeout_iters", int)
        put("batch_wait_max_tokens_ratio", "batch_wait_max_tokens_ratio", float)
        parallel = _trtllm_parallel(r)
        if r["attention_dp_enable_balance"] == "true":  # written with attention DP only
            engine["attention_dp_enable_balance"] = True
            put("attention_dp_timeout_iters", "attention_dp_timeout_iters", int)
            put("attention_dp_batching_wait_iters", "attention_dp_batching_wait_iters", int)
    elif backend == "sglang":
        put("scheduler_recv_interval", "scheduler_recv_interval", int)
        put("max_prefill_tokens", "max_prefill_tokens", int)
    spec = None
    if raw := r["speculative"].strip():
        method, n = raw.split(":")
        spec = {"method": method, "num_speculative_tokens": int(n)}
    return RowRecipe(
        engine=engine,
        kv_cache_dtype=_KV_DTYPES[r["kv_cache_dtype"].strip().lower()],
        concurrency=int(r["conc"]),
        speculative=spec,
        row=(r["model"], r["system"], backend, r["precision"], r["isl"], r["osl"]),
        parallel=parallel,
        moe_activation=r["moe_activation"].strip() or None,
        source=r["recipe"],
    )
