"""The engine section: per-worker engine knobs, and which of them only one backend has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from dynosim.checks import choice, flag, integer, number
from dynosim.errors import ConfigError

Backend = Literal["vllm", "sglang", "trtllm"]
SchedulePolicy = Literal["fcfs", "lpm"]
CapacityPolicy = Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"]

BLOCK_SIZES = (16, 32, 64, 128, 256, 512)
SGLANG_PAGE_SIZES = (1, 2, 4, 8)
"""Page sizes below 16 tokens: SGLang only (its ``--page-size`` defaults to 1)."""
BACKEND_ENGINE_FIELDS: dict[str, tuple[str, ...]] = {
    "vllm": ("async_scheduling", "allreduce_fusion"),
    "sglang": (
        "enable_mixed_chunk",
        "max_prefill_tokens",
        "schedule_policy",
        "schedule_conservativeness",
        "scheduler_recv_interval",
    ),
    "trtllm": (
        "capacity_scheduler_policy",
        "batch_wait_timeout_iters",
        "batch_wait_max_tokens_ratio",
        "attention_dp_enable_balance",
        "attention_dp_timeout_iters",
        "attention_dp_batching_wait_iters",
    ),
}
"""The engine fields only one backend has (``None`` = that backend's default)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Per-worker engine knobs.

    The first six apply to every backend and are named as vLLM names them; each backend's
    flag for them (``dynosim export`` writes it) is: ``max_num_seqs`` = SGLang
    ``--max-running-requests`` = TRT-LLM ``max_batch_size``; ``max_num_batched_tokens`` =
    SGLang ``--chunked-prefill-size`` = TRT-LLM ``max_num_tokens``; ``block_size`` = SGLang
    ``--page-size`` = TRT-LLM ``tokens_per_block``; ``enable_prefix_caching`` = SGLang's radix
    cache = TRT-LLM ``enable_block_reuse``.

    The others belong to one backend's scheduler (``None``: that backend's default) and are an
    error with another backend (:data:`BACKEND_ENGINE_FIELDS`):

    * SGLang (``sglang/srt/server_args.py``): ``enable_mixed_chunk`` (default false: prefill
      and decode batches alternate), ``max_prefill_tokens`` (16384: prompt tokens admitted per
      prefill batch), ``schedule_policy`` (``fcfs`` | ``lpm``: longest prefix match first),
      ``schedule_conservativeness`` (1.0: scales the output-token reservation that decides
      admission), ``scheduler_recv_interval`` (1: the scheduler takes the requests the
      tokenizer sent it at every iteration; ``N``: only after ``N`` decode iterations, at
      once after a prefill or mixed one, see :mod:`dynosim.engine.policies.sglang`);
    * vLLM: ``async_scheduling`` (``--async-scheduling`` / ``--no-async-scheduling``; default
      on since vLLM 0.14.0, whose release notes say "Async scheduling is now enabled by
      default", PR vllm-project/vllm#27614; off in earlier releases unless the flag is given).
      The scheduler then runs one step ahead of the GPU, so its host work per step (schedule,
      prepare inputs, process outputs) overlaps the previous step's kernels; without it that
      work runs between steps. ``false`` adds the calibration profile's ``synchronous`` step
      terms (:attr:`~dynosim.perf.calibration.BackendCalibration.synchronous`) to every step;
      ``allreduce_fusion`` (the compilation pass ``fuse_allreduce_rms``, formerly
      ``enable_fi_allreduce_fusion``; default off: vLLM's custom all-reduce): FlashInfer's
      TensorRT-LLM all-reduce fused with the residual add and RMSNorm, timed with
      AIConfigurator's TensorRT-LLM all-reduce (:mod:`dynosim.perf.aic.build`);
    * TRT-LLM (``tensorrt_llm/llmapi/llm_args.py`` ``SchedulerConfig``):
      ``capacity_scheduler_policy`` (``GUARANTEED_NO_EVICT``, the default: a request is
      admitted only if its whole output's KV can be reserved, and nothing is ever evicted |
      ``MAX_UTILIZATION``: pack the batch, pause the newest request on a shortage);
      ``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio`` (LLM API
      ``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio``, default 0 / 0.0: off):
      while generation requests run, new context requests wait up to that many iterations
      for the scheduled tokens to reach that fraction of ``max_num_batched_tokens``
      (``PyExecutor._waiting_requests``; see :class:`~dynosim.engine.policies.TrtllmWorker`);
      with attention DP, ``attention_dp_enable_balance``, ``attention_dp_timeout_iters`` and
      ``attention_dp_batching_wait_iters`` (LLM API ``attention_dp_config``: ``enable_balance``
      default false, ``timeout_iters`` 50, ``batching_wait_iters`` 10,
      ``AttentionDpConfig``): the ranks hold new context requests until every rank has one or
      the timeout passes (:class:`~dynosim.engine.lockstep.AdpBalance`).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 64
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    gpu_memory_utilization: float = 0.9
    enable_mixed_chunk: bool | None = None
    max_prefill_tokens: int | None = None
    schedule_policy: SchedulePolicy | None = None
    schedule_conservativeness: float | None = None
    scheduler_recv_interval: int | None = None
    capacity_scheduler_policy: CapacityPolicy | None = None
    batch_wait_timeout_iters: int | None = None
    batch_wait_max_tokens_ratio: float | None = None
    attention_dp_enable_balance: bool | None = None
    attention_dp_timeout_iters: int | None = None
    attention_dp_batching_wait_iters: int | None = None
    async_scheduling: bool | None = None
    allreduce_fusion: bool | None = None

    def __post_init__(self) -> None:
        integer("engine.max_num_seqs", self.max_num_seqs, 1, 65536)
        integer("engine.max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 20)
        if self.block_size not in BLOCK_SIZES + SGLANG_PAGE_SIZES:
            raise ConfigError(
                "engine.block_size", self.block_size, " | ".join(map(str, BLOCK_SIZES))
            )
        if self.enable_mixed_chunk is not None:
            flag("engine.enable_mixed_chunk", self.enable_mixed_chunk)
        if self.async_scheduling is not None:
            flag("engine.async_scheduling", self.async_scheduling)
        if self.allreduce_fusion is not None:
            flag("engine.allreduce_fusion", self.allreduce_fusion)
        if self.max_prefill_tokens is not None:
            integer("engine.max_prefill_tokens", self.max_prefill_tokens, 1, 1 << 20)
        if self.schedule_policy is not None:
            choice("engine.schedule_policy", self.schedule_policy, get_args(SchedulePolicy))
        if self.schedule_conservativeness is not None:
            number("engine.schedule_conservativeness", self.schedule_conservativeness, 0, 100)
        if self.scheduler_recv_interval is not None:
            integer("engine.scheduler_recv_interval", self.scheduler_recv_interval, 1, 1 << 20)
        if self.capacity_scheduler_policy is not None:
            choice(
                "engine.capacity_scheduler_policy",
                self.capacity_scheduler_policy,
                get_args(CapacityPolicy),
            )
        if self.batch_wait_max_tokens_ratio is not None:
            number("engine.batch_wait_max_tokens_ratio", self.batch_wait_max_tokens_ratio, 0, 1)
        if self.attention_dp_enable_balance is not None:
            flag("engine.attention_dp_enable_balance", self.attention_dp_enable_balance)
        for name in (
            "batch_wait_timeout_iters",
            "attention_dp_timeout_iters",
            "attention_dp_batching_wait_iters",
        ):
            if (value := getattr(self, name)) is not None:
                integer(f"engine.{name}", value, 0, 1 << 20)
        flag("engine.enable_prefix_caching", self.enable_prefix_caching)
        flag("engine.enable_chunked_prefill", self.enable_chunked_prefill)
        number("engine.gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, open_low=True)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                "engine.max_num_batched_tokens",
                self.max_num_batched_tokens,
                f">= engine.max_num_seqs ({self.max_num_seqs}), as vLLM requires",
            )


def check_backend_engine(backend: str, where: str, engine: EngineConfig) -> None:
    """A backend-specific engine field set for another backend is an error.

    ``where`` prefixes the field in the message (``decode.`` for a pool's engine).
    """
    for other, names in BACKEND_ENGINE_FIELDS.items():
        if other == backend:
            continue
        for name in names:
            value = getattr(engine, name)
            if value is not None:
                raise ConfigError(
                    f"{where}engine.{name}", value, f"only with backend: {other} (this is "
                    f"{backend})"
                )  # fmt: skip
    if backend != "sglang" and engine.block_size in SGLANG_PAGE_SIZES:
        raise ConfigError(
            f"{where}engine.block_size",
            engine.block_size,
            " | ".join(map(str, BLOCK_SIZES)) + f" with backend: {backend} (1-8: sglang only)",
        )
